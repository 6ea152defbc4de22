"""The dataset domain: the user's question/answer files, held-out rows kept out, one-line errors."""

from __future__ import annotations

import json
import random

import pytest

from configs import load_config
from domains import get_domain
from domains.dataset import DatasetFileError
from tasks.synthesize import admit
from tests.domains.labels import labelled


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _domain(tmp_path, rows, **dataset):
    paths = [_write(tmp_path / "train.jsonl", rows)]
    config = load_config(None, {"domain.name": "dataset", "domain.min_level": 1,
                                "domain.max_level": 2,
                                "domain.dataset": {"paths": paths, **dataset}})
    return get_domain("dataset", config)


ROWS = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i),
         "level": 1 + i % 2} for i in range(50)]


def test_fixed_fraction_is_held_out_and_never_proposed(tmp_path):
    domain = _domain(tmp_path, ROWS, heldout_fraction=0.2)
    heldout = domain.heldout(100)
    assert len(heldout) == 10
    assert heldout == _domain(tmp_path, ROWS, heldout_fraction=0.2).heldout(100)
    held = {p.text for p in heldout}
    assert not held & {r["question"] for r in domain.pool}
    rng = random.Random(0)
    drawn = [domain.generate(rng, 1 + n % 2) for n in range(200)]
    assert not held & {p.text for p in drawn}
    # a proposer copying a held-out question (other case and spacing) is dropped as heldout
    copy = "  " + heldout[0].text.upper().replace(" ", "  ")
    proposals, problems = admit(domain, [("<propose>L1:", copy)], source="proposer", seen=set(),
                                heldout=held, run_id="r", round_index=1)
    assert proposals[0]["drop_reason"] == "heldout" and problems == []


def test_heldout_file_and_split_column(tmp_path):
    test = _write(tmp_path / "test.jsonl", [{"question": "What is 0 + 0?", "answer": "0"},
                                             {"question": "What is 99 + 1?", "answer": "100"}])
    domain = _domain(tmp_path, ROWS, heldout_path=test)
    assert [p.text for p in domain.heldout(5)] == ["What is 0 + 0?", "What is 99 + 1?"]
    assert "What is 0 + 0?" not in {r["question"] for r in domain.pool}  # also in train: dropped
    split = [{**r, "split": "test" if i < 5 else "train"} for i, r in enumerate(ROWS)]
    assert len(_domain(tmp_path, split).heldout(100)) == 5


def test_answers_are_checked_by_math_equivalence(tmp_path):
    domain = _domain(tmp_path, [{"question": "Half of one?", "answer": "0.5"}, *ROWS])
    assert domain.score(["so \\boxed{1/2}", "the answer is 3", "no idea"],
                        labelled(["0.5", "0.5", "0.5"])) == [1.0, 0.0, None]


@pytest.mark.parametrize(
    ("rows", "dataset", "needle"),
    [([], {}, "has no rows"),
     ([{"q": "x", "answer": "1"}], {}, "no column 'question'"),
     ([{"q": "x", "a": "1"}], {"question_column": "q"}, "set domain.dataset.answer_column"),
     ([{"id": 1, "question": "a", "answer": "1"}, {"id": 1, "question": "b", "answer": "2"}], {},
      "duplicate id 1"),
     ([{"question": "a", "answer": "1", "level": 9}], {}, "level 9"),
     ([{"question": "a", "answer": "1"}], {"heldout_path": "/nonexistent.jsonl"}, "no such file")])
def test_bad_files_are_one_line_errors(tmp_path, rows, dataset, needle):
    with pytest.raises(DatasetFileError, match=needle) as info:
        _domain(tmp_path, rows, **dataset)
    assert "\n" not in str(info.value)


def test_unreadable_file_is_one_line_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a", "answer": 1}\nnot json\n')
    config = load_config(None, {"domain.name": "dataset", "domain.dataset.paths": [str(bad)]})
    with pytest.raises(DatasetFileError, match="unreadable") as info:
        get_domain("dataset", config)
    assert "\n" not in str(info.value)
