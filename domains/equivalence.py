"""Is an extracted answer equal to its reference? Exact (normalised text) or math-verify.

    exact  normalised text equality: whitespace collapsed, case folded, a trailing `.` and
           thousands commas of a number dropped ("1,234" = "1234", "Paris." = "paris")
    math   HF's math-verify (LaTeX and plain forms compared with sympy): `1/2` = `0.5` =
           `\\frac{1}{2}`, `x^2` = `x**2`; texts equal under `exact` are equal without a call

`math_equal` is cached by (answer, reference, timeout), so repeated pairs (k samples of one
problem often agree) cost one comparison. math-verify can loop on some inputs (R-Zero's FAQ):
in the main thread each call runs under math-verify's own SIGALRM limit (`timeout` seconds); a
call from another thread (where signals cannot be used) runs without one. A timed-out or failed
comparison returns None (reason `verifier_timeout` / `verifier_error`), never False.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

_NUMBER_COMMAS = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d+)?$")
_SPACES = re.compile(r"\s+")
CACHE_SIZE = 1 << 18


def normalise(text: str) -> str:
    """The form `exact` compares: stripped, whitespace collapsed, case folded, a trailing `.`
    dropped, thousands commas of a plain number removed."""
    text = _SPACES.sub(" ", text.strip()).rstrip(".").strip().casefold()
    return text.replace(",", "") if _NUMBER_COMMAS.match(text) else text


def exact_equal(answer: str, reference: str) -> bool:
    return normalise(answer) == normalise(reference)


def _parse(text: str, timeout: int | None):
    from math_verify import parse

    found = parse(text, parsing_timeout=timeout, raise_on_error=True)
    if not found:  # plain forms math-verify reads only as LaTeX: `x**2`, `2*x+1`
        found = parse(f"${text.replace('**', '^')}$", parsing_timeout=timeout,
                      raise_on_error=True)
    return found


@lru_cache(maxsize=CACHE_SIZE)
def math_equal(answer: str, reference: str, timeout: int = 5) -> tuple[bool | None, str | None]:
    """(equal, reason) of an answer and its reference under math-verify.

    Parameters
    ----------
    answer
        The extracted answer.
    reference
        The reference (or majority-vote label).
    timeout
        Seconds per parse and per comparison (main thread only; see the module docstring).

    Returns
    -------
    (True | False, None), or (None, "verifier_timeout" | "verifier_error") when math-verify
    could not decide. A side math-verify cannot read at all is compared by `exact_equal`.
    """
    if exact_equal(answer, reference):
        return True, None
    from math_verify import verify
    from math_verify.utils import TimeoutException

    limit = timeout if threading.current_thread() is threading.main_thread() else None
    try:
        gold, target = _parse(reference, limit), _parse(answer, limit)
        if not gold or not target:
            return False, None
        return bool(verify(gold, target, timeout_seconds=limit, raise_on_error=True)), None
    except TimeoutException:
        return None, "verifier_timeout"
    except Exception:  # noqa: BLE001 - sympy raises anything on odd input; recorded as a reason
        return None, "verifier_error"
