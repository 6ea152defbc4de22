"""reasoning-gym metadata as tagged JSON (domains/reasoning_gym_payload.py): it round-trips what
the generators put there, the same metadata gives the same text, and an item's own reference
scores 1.0 in a fresh process that has only the stored text."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from domains.reasoning_gym_payload import (
    UnstorableMetadata,
    decode_metadata,
    encode_metadata,
    metadata_from_text,
    metadata_text,
)

ROOT = Path(__file__).resolve().parents[2]


def _same(a, b) -> bool:
    """Equal, with the same types all the way down (a tuple is not a list, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())
    return a == b


def _round_trip(metadata: dict) -> dict:
    return metadata_from_text(metadata_text(metadata))


def test_json_values_are_written_as_themselves():
    metadata = {"numbers": [20, 83], "target": 148, "ratio": 0.5, "ok": True, "none": None,
                "name": "countdown", "nested": {"a": [1, {"b": "c"}]}}
    assert json.loads(metadata_text(metadata)) == metadata
    assert _same(_round_trip(metadata), metadata)


def test_tuples_sets_and_non_string_keys_round_trip():
    metadata = {"grid": ((1, 2), (3, 4)), "cells": [(0, 1), (2, 3)], "seen": {3, 1, 2},
                "frozen": frozenset({"x", "y"}), "coloring": {0: 1, 1: 2, 8: 2},
                "by_cell": {(0, 1): "a", (2, 3): "b"}, "mixed": {1: "int", "1": "str"},
                "dollar": {"$tuple": "a plain key that looks like a tag"},
                "empty": {"list": [], "tuple": (), "set": set(), "dict": {}}}
    back = _round_trip(metadata)
    assert back == metadata
    assert type(back["grid"]) is tuple and type(back["grid"][0]) is tuple
    assert type(back["cells"][0]) is tuple and type(back["seen"]) is set
    assert type(back["frozen"]) is frozenset and list(back["coloring"]) == [0, 1, 8]
    assert back["by_cell"][(0, 1)] == "a" and back["mixed"] == {1: "int", "1": "str"}
    assert back["dollar"] == {"$tuple": "a plain key that looks like a tag"}
    assert type(back["empty"]["tuple"]) is tuple and type(back["empty"]["set"]) is set


def test_numbers_beyond_json_round_trip():
    metadata = {"np_str": np.str_("Knight"), "np_float": np.float64(0.1), "np_int": np.int64(7),
                "np_bool": np.bool_(True), "array": np.arange(6, dtype=np.int32).reshape(2, 3),
                "fraction": Fraction(3, 4), "decimal": Decimal("1.50"), "complex": 1 - 2j,
                "big": 2**100, "nan": float("nan"), "inf": float("-inf"), "bytes": b"\x00\xff"}
    back = _round_trip(metadata)
    for key in ("np_str", "np_float", "np_int", "np_bool", "fraction", "decimal", "complex",
                "big", "inf", "bytes"):
        assert _same(back[key], metadata[key]), key
    assert _same(back["array"], metadata["array"])
    assert type(back["nan"]) is float and back["nan"] != back["nan"]
    assert "NaN" not in metadata_text(metadata)  # strict JSON: non-finite floats are tagged


def test_the_same_metadata_gives_the_same_text():
    one = {"b": {3, 1, 2}, "a": {2: "x", 1: "y"}, "c": frozenset({(2, 1), (1, 2)})}
    other = {"c": frozenset({(1, 2), (2, 1)}), "a": {1: "y", 2: "x"}, "b": {2, 3, 1}}
    text = metadata_text(one)
    assert text == metadata_text(other)
    assert " " not in text and text.index('"a"') < text.index('"b"') < text.index('"c"')
    assert metadata_text(_round_trip(one)) == text
    assert decode_metadata(encode_metadata(one)) == one


class _Custom:
    pass


def test_a_value_it_cannot_store_is_one_line_naming_task_path_and_type():
    with pytest.raises(UnstorableMetadata) as error:
        encode_metadata({"puzzle": {"cells": [1, _Custom()]}}, "some_task")
    message = str(error.value)
    assert "\n" not in message and "'some_task'" in message
    assert "metadata['puzzle']['cells'][1]" in message and "_Custom" in message
    assert error.value.path == "['puzzle']['cells'][1]" and error.value.task == "some_task"
    with pytest.raises(UnstorableMetadata, match="numpy.ndarray of dtype object"):
        encode_metadata({"a": np.array([object()], dtype=object)})
    with pytest.raises(ValueError, match="unknown tag '\\$pickle'"):
        metadata_from_text('{"a":{"$pickle":"..."}}')


# ---- an item's reference scores 1.0 from the stored text alone, in a fresh process ------------

# countdown checks the numbers the answer uses, rearc compares grids held as tuples (plain
# JSON lists score 0.05), n_queens reads its valid answers: all from the metadata.
TASKS = ("countdown", "rearc", "n_queens")

_FRESH = """
import json, sys
from reasoning_gym.factory import DATASETS, create_curriculum
from domains.reasoning_gym_payload import metadata_from_text
out = {}
for item in json.loads(sys.stdin.read()):
    curriculum = create_curriculum(item["task"])
    curriculum.set_global_level(0)
    settings = curriculum.generate_configuration({"seed": 2**31, "size": 1})
    entry = {"question": item["question"], "answer": item["reference"],
             "metadata": metadata_from_text(item["metadata"])}
    out[item["task"]] = DATASETS[item["task"]][0](config=settings).score_answer(
        item["reference"], entry)
print(json.dumps(out))
"""


def _item(task: str):
    """A level-1 dataset of `task` and its item 0."""
    from reasoning_gym.factory import DATASETS, create_curriculum

    curriculum = create_curriculum(task)
    curriculum.set_global_level(0)
    settings = curriculum.generate_configuration({"seed": 0, "size": 1})
    dataset = DATASETS[task][0](config=settings)
    return dataset, dataset[0]


def test_references_score_full_in_a_fresh_process_from_the_stored_text():
    entries = {task: _item(task)[1] for task in TASKS}
    items = [{"task": task, "question": entry["question"], "reference": str(entry["answer"]),
              "metadata": metadata_text(entry["metadata"], task)}
             for task, entry in entries.items()]
    result = subprocess.run([sys.executable, "-c", _FRESH], input=json.dumps(items), cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout) == {task: 1.0 for task in TASKS}


def test_plain_json_would_lose_what_rearc_scores():
    """The tagged encoding is needed: rearc's reference fails on metadata through plain JSON."""
    dataset, entry = _item("rearc")
    reference = str(entry["answer"])
    plain = json.loads(json.dumps(entry["metadata"], default=str))
    assert dataset.score_answer(reference, {**entry, "metadata": plain}) < 1.0
    assert dataset.score_answer(reference, {**entry,
                                            "metadata": _round_trip(entry["metadata"])}) == 1.0
