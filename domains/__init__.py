"""Problem domains. A domain is one module deriving from `domains.base.Domain`, registered in
`configs.domain.DOMAINS` (docs/domains.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from domains.base import Domain

if TYPE_CHECKING:
    from configs import RunConfig


def get_domain(name: str, config: RunConfig | None = None) -> Domain:
    """The domain called `name`, built from the run's config (None: the defaults); with a
    `model.path` or a changed `[prompt]` section, wrapped so that its prompts go through the
    model's chat template and its completions are cut at the stop strings (domains/chat.py);
    with `verify.reward_function` or `verify.compare = "judge"` or `"reward_model"`, judged by
    that (domains/judge.py)."""
    domain = _build_domain(name, config)
    if config is None:
        return domain
    from configs import PromptConfig
    from domains.judge import judged_domain

    if config.model.path is None and config.prompt == PromptConfig():
        return judged_domain(domain, config)
    from domains.chat import ChatDomain

    return judged_domain(ChatDomain(domain, config.prompt, config.model.path,
                                    config.model.revision), config)


def _build_domain(name: str, config: RunConfig | None) -> Domain:
    from importlib import import_module

    from configs.domain import DOMAINS

    if name not in DOMAINS:
        msg = f"unknown domain {name!r}; available: {', '.join(DOMAINS)}"
        raise ValueError(msg)
    module, _, cls = DOMAINS[name].partition(":")
    return getattr(import_module(module), cls)(config)
