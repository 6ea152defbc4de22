"""Great Expectations' pure per-expectation work, done once instead of dozens of times.

A gate's time is almost all GX's bookkeeping around each expectation, not the data: a suite of
27 expectations on 200 rows costs about as much as on 40,000. Four pieces of it are
recomputed from the same inputs over and over within one validation:

- an expectation's class name turned into its type (`camel_to_snake`, about 90 calls per
  expectation), pure: memoised for the process;
- an expectation's `configuration`, a pydantic `dict()` of all its fields rebuilt on every read
  (about 60 reads per expectation), and the expectation object a configuration describes
  (`to_domain_obj`, a validated pydantic model built again for each of the expectation's
  metrics): each built once per object while `built_once()` is active, around one validation.
  There GX only reads them; the one configuration it changes (a copy given the batch id) it
  changes before building anything from it;
- a metric's id (`IDDict.to_id`: the md5 of the sorted JSON of its keyword arguments, two per
  metric, about 20 metrics per expectation), pure: memoised for the process by the arguments'
  literal values (str, int, float, bool, None, tuples of them); any other value is computed as
  GX does.

`install()` puts them in place once per process (validators/gx_results.py `_batch_definition`);
tests/validators/test_gx_memo.py checks that a validation's result JSON is the same with and
without them, passing and failing.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

# What the current `built_once()` scope built: (what, id(object)) -> (the object, the result);
# the object is kept so that its id is not reused meanwhile.
Built = dict[tuple[str, int], tuple[Any, Any]]
_BUILT: contextvars.ContextVar[Built | None] = contextvars.ContextVar("gx_built", default=None)
_LITERALS = (str, int, float, bool, type(None))
MAX_IDS = 100_000  # distinct metric arguments remembered (a few dozen per suite in practice)


def _literal(value: Any) -> bool:
    return isinstance(value, _LITERALS) or (
        isinstance(value, tuple) and all(_literal(v) for v in value))


# GX's own functions, as they were before `install` (tests put them back to compare)
ORIGINALS: dict[str, Any] = {}


@functools.cache
def install() -> None:
    """Memoise the four pieces in GX's classes (once per process)."""
    from great_expectations.core.id_dict import IDDict
    from great_expectations.expectations import expectation
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    ORIGINALS.update(camel_to_snake=expectation.camel_to_snake,
                     configuration=expectation.Expectation.configuration,
                     to_domain_obj=ExpectationConfiguration.to_domain_obj, to_id=IDDict.to_id)
    expectation.camel_to_snake = functools.cache(expectation.camel_to_snake)
    expectation.Expectation.configuration = property(
        _built_once_per_object(expectation.Expectation.configuration.fget, "configuration"))
    ExpectationConfiguration.to_domain_obj = _built_once_per_object(
        ExpectationConfiguration.to_domain_obj, "to_domain_obj")
    IDDict.to_id = _id_by_value(IDDict.to_id)


def _built_once_per_object(original: Any, name: str) -> Any:
    """`original(self)`, remembered per object (and `name`) inside a `built_once()` scope."""
    def once(self: Any) -> Any:
        built = _BUILT.get()
        if built is None:
            return original(self)
        key = (name, id(self))
        hit = built.get(key)
        if hit is None or hit[0] is not self:
            hit = built[key] = (self, original(self))
        return hit[1]

    once.__doc__ = original.__doc__
    return once


def _id_by_value(original: Any) -> Any:
    ids: dict[str, Any] = {}

    def to_id(self: Any, id_keys: Any = None, id_ignore_keys: Any = None) -> Any:
        if id_keys is not None or id_ignore_keys is not None or not all(
                isinstance(k, str) and _literal(v) for k, v in self.items()):
            return original(self, id_keys, id_ignore_keys)
        # repr tells 1, 1.0 and True apart, which JSON does too; the class sets ignored keys
        key = f"{type(self).__qualname__}{sorted(self.items())!r}"
        found = ids.get(key)
        if found is None:
            if len(ids) >= MAX_IDS:
                ids.clear()
            found = ids[key] = original(self)
        return found

    return to_id


@contextlib.contextmanager
def built_once() -> Iterator[None]:
    """Within the block, each expectation's `configuration` and each configuration's
    expectation object are built on their first use and reused after (one validation)."""
    token = _BUILT.set({})
    try:
        yield
    finally:
        _BUILT.reset(token)
