"""Problem domains. A domain is one module implementing `domains.base.Domain`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from domains.base import Domain

if TYPE_CHECKING:
    from configs import RunConfig


def get_domain(name: str, config: RunConfig | None = None) -> Domain:
    """The domain called `name`, built from the run's config (None: the defaults); with a
    `model.path` or a changed `[prompt]` section, wrapped so that its prompts go through the
    model's chat template and its completions are cut at the stop strings (domains/chat.py)."""
    domain = _build_domain(name, config)
    if config is None:
        return domain
    from configs import PromptConfig

    if config.model.path is None and config.prompt == PromptConfig():
        return domain
    from domains.chat import ChatDomain

    return ChatDomain(domain, config.prompt, config.model.path)


def _build_domain(name: str, config: RunConfig | None) -> Domain:
    if name == "arithmetic":
        from domains.arithmetic import ArithmeticDomain

        return ArithmeticDomain()
    if name == "python_io":
        from domains.python_io import PythonIODomain

        return PythonIODomain(config)
    if name == "reasoning_gym":
        from domains.reasoning_gym import ReasoningGymDomain

        return ReasoningGymDomain(config)
    if name == "dataset":
        from domains.dataset import DatasetDomain

        return DatasetDomain(config)
    msg = f"unknown domain {name!r}; available: arithmetic, python_io, reasoning_gym, dataset"
    raise ValueError(msg)
