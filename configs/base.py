"""What every config section shares: the base model (unknown keys refused, frozen), the error
users see, and the checks several sections use."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# A run id names a folder under <data-root>/runs/ and a Prefect deployment: the one rule of
# storage/paths.py (`check_run_id`; the pattern is for `re.fullmatch`, unanchored).
from storage.paths import RUN_ID_PATTERN, RUN_ID_RULE, is_run_id  # noqa: E402,F401 - re-exported


class ConfigError(ValueError):
    """A config file or override is unusable; the message is one line meant for the user."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def one_placeholder(key: str, value: str, name: str) -> str:
    """`value` when `{name}` is its only format placeholder; else a ValueError naming `key`."""
    try:
        value.format(**{name: "1"})
    except (KeyError, IndexError, ValueError) as exc:
        msg = (f"{key} = {value!r}: only the placeholder {{{name}}} is allowed ({exc!r}); "
               f"write other braces as {{{{ and }}}}")
        raise ValueError(msg) from None
    return value
