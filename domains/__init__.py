"""Problem domains. A domain is one module implementing `domains.base.Domain`."""

from domains.base import Domain


def get_domain(name: str) -> Domain:
    if name == "arithmetic":
        from domains.arithmetic import ArithmeticDomain

        return ArithmeticDomain()
    msg = f"unknown domain {name!r}; available: arithmetic"
    raise ValueError(msg)
