"""Problem domains. A domain is one module implementing `flywheel.domains.base.Domain`."""

from flywheel.domains.base import Domain


def get_domain(name: str) -> Domain:
    if name == "arithmetic":
        from flywheel.domains.arithmetic import ArithmeticDomain

        return ArithmeticDomain()
    msg = f"unknown domain {name!r}; available: arithmetic"
    raise ValueError(msg)
