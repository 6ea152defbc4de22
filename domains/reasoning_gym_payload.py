"""A reasoning-gym item's metadata as JSON, so a fresh process scores it as its maker did.

Many tasks' `score_answer(answer, entry)` read `entry["metadata"]` (countdown checks the
numbers used, graph_color the edges, ...). A problem row stores it as text (the row's
`payload`), and judging rebuilds the entry from that text. JSON alone loses what the generators
put there: tuples come back as lists, dicts keyed by ints come back keyed by strings, numpy
scalars cannot be written. This module writes a small tagged JSON that round-trips them:

    plain JSON   None, bool, int, str, finite float, list, dict with str keys (none "$..."):
                 written as themselves
    {"$tuple": [...]}                 tuple
    {"$set": [...]}, {"$frozenset": [...]}   elements sorted by their encoded text
    {"$dict": [[key, value], ...]}    a dict with a key that is not a str, or a str key that
                                      starts with "$"; pairs sorted by the key's encoded text
    {"$float": "nan" | "inf" | "-inf"}
    {"$complex": [real, imag]}, {"$fraction": "3/4"}, {"$decimal": "1.50"},
    {"$bytes": "<base64>"}
    {"$numpy": [dtype, value]}        a numpy scalar (numpy.int64, numpy.float64, numpy.str_, ...)
    {"$ndarray": [dtype, shape, nested list]}   a numpy array of numbers, bools or strings

A one-key dict whose key starts with "$" is always a tag (plain dicts with such keys are written
as `$dict`), so decoding is unambiguous. Anything else (a custom object, an enum, a str or int
subclass, an object array) raises `UnstorableMetadata` naming the task, the key path and the
type: Flywheel never pickles or imports a class named by stored data. `metadata_text` is
`json.dumps` of the encoding with sorted keys and no spaces, so the same metadata always gives
the same text (the settings of `domains.base.payload_text`, which stores a row's payload).

Measured (reasoning-gym 0.1.25, every task with a curriculum, levels 1-3): metadata holds dicts
(codeio and graph_color key some by int), lists, tuples (82 of 102 tasks; arc_agi and rearc
score grids as tuples, so plain JSON fails them), str, int, float, bool, numpy.str_
(knights_knaves) and numpy.float64 (codeio); no sets, fractions or custom objects, and every item
of bench/reasoning_gym_sweep.py round-trips equal.
"""

from __future__ import annotations

import base64
import json
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

TAGS = ("$tuple", "$set", "$frozenset", "$dict", "$float", "$complex", "$fraction", "$decimal",
        "$bytes", "$numpy", "$ndarray")


class UnstorableMetadata(ValueError):
    """A value in a task's metadata that the tagged JSON cannot hold (one line: task, key path
    and type)."""

    def __init__(self, task: str | None, path: str, type_name: str) -> None:
        self.task, self.path, self.type_name = task, path, type_name
        owner = f"reasoning-gym task {task!r}" if task else "reasoning-gym metadata"
        super().__init__(f"{owner}: metadata{path} is a {type_name}, which a problem row "
                         "cannot store (domains/reasoning_gym_payload.py); leave the task out of "
                         "domain.reasoning_gym.tasks")


def _type_name(value: Any) -> str:
    kind = type(value)
    if _is_numpy(value) and hasattr(value, "dtype"):
        return f"{kind.__module__}.{kind.__qualname__} of dtype {value.dtype}"
    return kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


def _text(encoded: Any) -> str:
    return json.dumps(encoded, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _numpy() -> Any:
    import numpy

    return numpy


def _is_numpy(value: Any) -> bool:
    module = type(value).__module__
    return module == "numpy" or module.startswith("numpy.")


def _encode(value: Any, task: str | None, path: str) -> Any:
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        return [_encode(v, task, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind is tuple:
        return {"$tuple": [_encode(v, task, f"{path}[{i}]") for i, v in enumerate(value)]}
    if kind in (set, frozenset):
        items = sorted((_encode(v, task, f"{path}{{}}") for v in value), key=_text)
        return {"$set" if kind is set else "$frozenset": items}
    if kind is dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: _encode(v, task, f"{path}[{k!r}]") for k, v in value.items()}
        pairs = [[_encode(k, task, f"{path}<key {k!r}>"), _encode(v, task, f"{path}[{k!r}]")]
                 for k, v in value.items()]
        return {"$dict": sorted(pairs, key=lambda pair: _text(pair[0]))}
    if kind is complex:
        return {"$complex": [_encode(value.real, task, path), _encode(value.imag, task, path)]}
    if kind is Fraction:
        return {"$fraction": str(value)}
    if kind is Decimal:
        return {"$decimal": str(value)}
    if kind is bytes:
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if _is_numpy(value):
        numpy = _numpy()
        if isinstance(value, numpy.ndarray) and value.dtype.kind in "biufcU":
            return {"$ndarray": [value.dtype.str, list(value.shape),
                                 _encode(value.tolist(), task, path)]}
        if isinstance(value, numpy.generic) and value.dtype.kind in "biufcU":
            return {"$numpy": [value.dtype.str, _encode(value.item(), task, path)]}
    raise UnstorableMetadata(task, path, _type_name(value))


def encode_metadata(metadata: dict, task: str | None = None) -> Any:
    """The JSON-able tagged form of a reasoning-gym item's metadata; `UnstorableMetadata`
    (naming `task`, the key path and the type) for a value it cannot hold."""
    if type(metadata) is not dict:
        raise UnstorableMetadata(task, "", _type_name(metadata))
    return _encode(metadata, task, "")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, body), = value.items()
        if tag.startswith("$"):
            return _decode_tag(tag, body)
    return {k: _decode(v) for k, v in value.items()}


def _decode_tag(tag: str, body: Any) -> Any:
    if tag == "$tuple":
        return tuple(_decode(v) for v in body)
    if tag == "$set":
        return {_decode(v) for v in body}
    if tag == "$frozenset":
        return frozenset(_decode(v) for v in body)
    if tag == "$dict":
        return {_decode(k): _decode(v) for k, v in body}
    if tag == "$float":
        return float(body)
    if tag == "$complex":
        return complex(_decode(body[0]), _decode(body[1]))
    if tag == "$fraction":
        return Fraction(body)
    if tag == "$decimal":
        return Decimal(body)
    if tag == "$bytes":
        return base64.b64decode(body)
    if tag == "$numpy":
        numpy = _numpy()
        return numpy.dtype(body[0]).type(_decode(body[1]))
    if tag == "$ndarray":
        numpy = _numpy()
        dtype, shape, data = body
        return numpy.array(_decode(data), dtype=numpy.dtype(dtype)).reshape(shape)
    msg = f"stored reasoning-gym metadata has the unknown tag {tag!r} (known: {', '.join(TAGS)})"
    raise ValueError(msg)


def decode_metadata(value: Any) -> dict:
    """The metadata `encode_metadata` encoded (tuples, sets, int keys, numpy values restored)."""
    decoded = _decode(value)
    if not isinstance(decoded, dict):
        msg = f"stored reasoning-gym metadata is a {type(decoded).__name__}, not a dict"
        raise ValueError(msg)
    return decoded


def metadata_text(metadata: dict, task: str | None = None) -> str:
    """The encoding as compact JSON with sorted keys (the same metadata, the same text)."""
    return _text(encode_metadata(metadata, task))


def metadata_from_text(text: str) -> dict:
    """The metadata `metadata_text` wrote."""
    return decode_metadata(json.loads(text))

