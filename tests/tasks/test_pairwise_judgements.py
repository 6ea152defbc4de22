"""Pairwise judging (`[verify.judge] mode = "pairwise"`, domains/pairwise.py): each answer is
compared with the reference in both orders; two orders that disagree are a tie, and a judge
that favours one position shows in the judgements' `position_consistent`."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from configs import ScaleConfig
from domains import get_domain
from domains.checking import Judgement
from domains.judge_rows import model_judge_of, remember_stored
from storage.fingerprint import file_checksum
from tasks.verify import stream_verdicts
from tests.tasks.scripted_judge import (
    ArithmeticJudge,
    judged_config,
    judged_files,
)


class PairwiseJudge(ArithmeticJudge):
    """Prefers the answer whose value is right (A or B), TIE when both or neither are; with
    `biased`, always A (a judge that favours the first position)."""

    biased = False

    @classmethod
    def reply(cls, prompt: str) -> str:
        if cls.biased:
            return "A"
        asked = re.search(r"Question: (?P<q>.*?)=?\s*\n\nAnswer A: (?P<a>.*?)\n\n"
                          r"Answer B: (?P<b>.*?)\n\n", prompt, re.S)
        value = str(eval(asked["q"], {"__builtins__": {}}))  # noqa: S307 - digits and + - *
        right = (asked["a"].strip() == value, asked["b"].strip() == value)
        return {(True, False): "A", (False, True): "B"}.get(right, "TIE")


@pytest.fixture
def pairwise_folder(judge_folder, monkeypatch):
    from models import backends

    real = backends.make_backend
    monkeypatch.setattr(backends, "make_backend", lambda name, checkpoint, **o: (
        PairwiseJudge() if Path(checkpoint) == judge_folder else real(name, checkpoint, **o)))
    PairwiseJudge.biased = False
    return judge_folder


PAIRED = [("2+3", "5"), ("2+3", "6"), ("2+3", "6"), ("4*4", "15"), ("7-9", "<think>")]


def test_pairwise_judges_both_orders_against_the_reference(tmp_path, pairwise_folder):
    config = judged_config(pairwise_folder, **{"verify.judge.mode": "pairwise"})
    paths = judged_files(tmp_path, PAIRED)
    written = stream_verdicts(get_domain("arithmetic", config), ScaleConfig(), paths["rollouts"],
                              paths["problems"], "reference", tmp_path / "verdicts.parquet")
    judged = pl.read_parquet(written["judgements"].path)
    verdicts = pl.read_parquet(written["verdicts"].path)
    # the right answer ties with the reference, a wrong one loses in both orders
    assert judged["reward"].to_list() == [0.5, 0.0, 0.0, 0.0]
    assert judged["reply"].to_list() == ["TIE", "B", "B", "B"]
    assert judged["reply_swapped"].to_list() == ["TIE", "A", "A", "A"]
    assert judged["position_consistent"].to_list() == [True] * 4
    first, swapped = judged["prompt"][1], judged["prompt_swapped"][1]
    assert "Answer A: 6" in first and "Answer B: 5" in first
    assert "Answer A: 5" in swapped and "Answer B: 6" in swapped
    assert verdicts["reward"].to_list() == [0.5, 0.0, 0.0, 0.0, None]
    # 3 distinct answers x 2 orders in one call; 5 vs 5 reads the same in both orders
    assert ArithmeticJudge.CALLS == [5]

    ArithmeticJudge.CALLS.clear()
    again = get_domain("arithmetic", config)
    remember_stored(model_judge_of(again), written["judgements"].path)
    second = stream_verdicts(again, ScaleConfig(), paths["rollouts"], paths["problems"],
                             "reference", tmp_path / "b" / "verdicts.parquet")
    assert ArithmeticJudge.CALLS == []
    assert file_checksum(written["verdicts"].path) == file_checksum(second["verdicts"].path)


def test_a_position_biased_judge_gives_ties_and_shows_in_the_rows(tmp_path, pairwise_folder):
    PairwiseJudge.biased = True
    config = judged_config(pairwise_folder, **{"verify.judge.mode": "pairwise"})
    paths = judged_files(tmp_path, PAIRED[:4])
    written = stream_verdicts(get_domain("arithmetic", config), ScaleConfig(), paths["rollouts"],
                              paths["problems"], "reference", tmp_path / "verdicts.parquet")
    judged = pl.read_parquet(written["judgements"].path)
    assert judged["reward"].to_list() == [0.5] * 4
    assert judged["position_consistent"].to_list() == [False] * 4

    import duckdb  # the audit's judge lines over these files (storage/audit/judge_quality.py)

    from storage.audit.judge_quality import judge_lines

    con = duckdb.connect()
    for kind, path in (("judgements", written["judgements"].path),
                       ("verdicts", written["verdicts"].path), ("problems", paths["problems"])):
        con.execute(f"CREATE VIEW {kind} AS SELECT * FROM read_parquet('{path}')")
    lines = judge_lines(con)
    assert lines[0].startswith("round 1 judge judge[") and "4 answers" in lines[0]
    assert lines[2] == ("  position-inconsistent 1.000 of 4 pairs (both orders judged; a "
                        "disagreement is a tie)")
    # the biased judge ties everything, and a tie with the reference passes (reward >= 0.5)
    assert lines[3] == ("  agrees with the references on 0.250 of 4 (passes a wrong answer 3, "
                        "fails a right one 0)")


def test_pairwise_without_a_reference_asks_nothing_and_says_why(tmp_path, pairwise_folder):
    domain = get_domain("arithmetic", judged_config(pairwise_folder,
                                                    **{"verify.judge.mode": "pairwise"}))
    row = {"text": "2+3", "reference": None, "level": 1, "task": None, "payload": None}
    assert domain.judge(["5", "<think>cut"], [row, row]) == [
        Judgement(None, "none"), Judgement(None, "thinking_unfinished")]
    assert ArithmeticJudge.CALLS == []


@pytest.mark.parametrize(("first", "second", "outcome"), [
    ("A", "B", (1.0, True)), ("B", "A", (0.0, True)), ("TIE", "tie", (0.5, True)),
    ("A", "A", (0.5, False)), ("B", "B", (0.5, False)), ("A", "TIE", (0.5, False)),
    ("Answer A is better", " B", (1.0, True)), ("a", "B", (None, None)),
    ("", "A", (None, None)),
])
def test_the_two_orders_make_one_reward(first, second, outcome):
    from domains.pairwise import pair_outcome

    assert pair_outcome(first, second) == outcome
