"""The canonical text of plain data: one writer for a program's outputs (in the sandbox's
children) and for answers (the host), standard library only; the worker script loads it from its
own folder.

    canonical({"b": [1, (2,)], "a": {3, 1}})   # "{'a': {1, 3}, 'b': [1, (2,)]}"
"""

from __future__ import annotations


class Unsupported(Exception):
    """The program returned a value that is not plain data."""


_int_repr, _float_repr, _str_repr = int.__repr__, float.__repr__, str.__repr__
_type, _len, _sorted = type, len, sorted


def canonical(value: object, depth: int = 0) -> str:
    """The canonical text of plain data: exact builtin types only, sets and dict items sorted, so
    two equal values always print alike and a subclass cannot forge its own repr."""
    kind = _type(value)
    if depth > 20:
        raise Unsupported("nested deeper than 20")
    if value is None or kind is bool:
        return "None" if value is None else ("True" if value else "False")
    if kind is int:
        return _int_repr(value)
    if kind is float:
        return _float_repr(value)
    if kind is str:
        return _str_repr(value)
    if kind in (list, tuple):
        items = [canonical(v, depth + 1) for v in value]
        if kind is list:
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if _len(items) == 1 else "") + ")"
    if kind in (set, frozenset):
        items = _sorted(canonical(v, depth + 1) for v in value)
        text = "{" + ", ".join(items) + "}" if items else "set()"
        return text if kind is set else f"frozenset({text})" if items else "frozenset()"
    if kind is dict:
        items = _sorted(f"{canonical(k, depth + 1)}: {canonical(v, depth + 1)}"
                        for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise Unsupported(f"returned a {kind.__name__}, not plain data")
