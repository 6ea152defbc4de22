"""Alarms for a loop that fools itself: each fault planted in hand-built round data (rising
training reward with flat held-out accuracy, a proposer repeating itself, a held-out question
copied into a training row, majority labels getting worse) is caught and blocks promotion with
its reason, the same data without the fault trips nothing, alarms block nothing by default, and
the promote stage itself consults them."""

from __future__ import annotations

import json
import time

import polars as pl
import pytest

from configs import AlarmsConfig, load_config
from domains.arithmetic import ArithmeticDomain
from storage.datasets import write_atomic
from tasks.alarms import (
    alarm_metrics,
    heldout_overlap,
    leak_metrics,
    proposer_novelty,
    round_alarms,
)
from tasks.context import Checkpoint, RunContext
from tasks.evaluate import Evaluation
from tasks.promote import Decision, promote, with_alarms
from tasks.verify import verdict_metrics

domain = ArithmeticDomain()
HELDOUT = [p.text for p in domain.heldout(40)]
BLOCK_ALL = AlarmsConfig(block=["reward_without_accuracy", "novelty_collapse", "heldout_leak",
                                "label_accuracy_drop"])


def _verdicts(rewards: list[float]) -> list[dict]:
    return [{"problem_id": f"p{i // 4}", "reward": r, "method": "reference"}
            for i, r in enumerate(rewards)]


def _proposals(admitted: int, repeated: int, invalid: int = 5) -> pl.DataFrame:
    reasons = [None] * admitted + ["duplicate", "near_duplicate"] * (repeated // 2) + [
        "invalid"] * invalid
    return pl.DataFrame({"source": ["proposer"] * len(reasons), "drop_reason": reasons},
                        schema={"source": pl.String, "drop_reason": pl.String})


def _train_rows(problem_texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame({
        "prompt": [domain.solver_prompt(t) for t in problem_texts],
        "completion": [domain.parse(t).reference for t in problem_texts],
        "rejected": [None] * len(problem_texts),
        "problem": [json.dumps({"text": t}) for t in problem_texts]},
        schema={"prompt": pl.String, "completion": pl.String, "rejected": pl.String,
                "problem": pl.String})


def _label_precision(right_labels: int, problems: int = 5) -> float:
    """verify's label_precision of a majority-vote round whose first `right_labels` votes are
    right (each problem: 3 of 4 samples give the vote)."""
    verdicts, references = [], []
    for p in range(problems):
        vote = "1" if p < right_labels else "2"
        references.append({"problem_id": f"p{p}", "reference": "1"})
        verdicts += [{"problem_id": f"p{p}", "answer": a, "reward": float(a == vote),
                      "method": "majority", "label": vote} for a in (vote, vote, vote, "9")]
    return verdict_metrics(verdicts, references, "majority")["label_precision"]


def _clean() -> dict[tuple[int, str, str], float]:
    """Rounds 1 and 2 of a loop that improves: reward and held-out accuracy rise together, the
    proposer writes mostly new problems, the training rows hold no held-out text, the votes
    stay right."""
    metrics = {}
    rounds = {1: ([1, 0, 0, 0] * 4, 0.30), 2: ([1, 1, 0, 0] * 4, 0.40)}
    for r, (rewards, accuracy) in rounds.items():
        metrics[r, "verify", "mean_reward"] = verdict_metrics(_verdicts(rewards), [])[
            "mean_reward"]
        metrics[r, "evaluate", "accuracy"] = accuracy
        metrics[r, "curate", "proposer_novelty"] = proposer_novelty(_proposals(60, 30))
        metrics[r, "verify", "label_precision"] = _label_precision(4)
        metrics.update({(r, "curate", k): v for k, v in leak_metrics(
            HELDOUT, _train_rows(["12+7", "3*4-1", "12+" + HELDOUT[0]])).items()})
    return metrics


def _fault(name: str) -> dict[tuple[int, str, str], float]:
    """The clean rounds with one fault planted in round 2's data."""
    metrics = _clean()
    if name == "reward_without_accuracy":  # reward 0.25 -> 0.75, accuracy stays 0.30
        metrics[2, "verify", "mean_reward"] = verdict_metrics(_verdicts([1, 1, 1, 0] * 4), [])[
            "mean_reward"]
        metrics[2, "evaluate", "accuracy"] = 0.30
    elif name == "novelty_collapse":  # 5 new problems among 95 valid samples
        metrics[2, "curate", "proposer_novelty"] = proposer_novelty(_proposals(5, 90))
    elif name == "heldout_leak":  # a held-out question trained on as a solver row
        metrics.update({(2, "curate", k): v for k, v in leak_metrics(
            HELDOUT, _train_rows(["12+7", HELDOUT[3]])).items()})
    elif name == "label_accuracy_drop":  # 4 of 5 votes right, then 3 of 5
        metrics[2, "verify", "label_precision"] = _label_precision(3)
    return metrics


FAULTS = ["reward_without_accuracy", "novelty_collapse", "heldout_leak", "label_accuracy_drop"]
PROMOTED = Decision(True, "accuracy 0.400 >= 0.300 - 0.000")


def test_the_clean_rounds_trip_no_alarm():
    alarms = round_alarms(_clean(), 2, BLOCK_ALL)
    assert [a.name for a in alarms] == FAULTS
    assert all(a.measured and not a.fired for a in alarms), [a.reason for a in alarms]
    assert with_alarms(PROMOTED, alarms, BLOCK_ALL) == PROMOTED


@pytest.mark.parametrize("fault", FAULTS)
def test_each_planted_fault_is_caught_before_promotion(fault):
    alarms = {a.name: a for a in round_alarms(_fault(fault), 2, BLOCK_ALL)}
    assert [name for name, a in alarms.items() if a.fired] == [fault]
    decision = with_alarms(PROMOTED, list(alarms.values()), BLOCK_ALL)
    assert not decision.promoted
    assert decision.reason == f"{PROMOTED.reason}; alarm {fault}: {alarms[fault].reason}"
    assert "\n" not in decision.reason
    assert alarm_metrics(list(alarms.values()))[f"alarm_{fault}"] == 1.0


def test_the_reasons_state_the_figures_against_their_bars():
    reasons = {a.name: a.reason for a in round_alarms(_fault("reward_without_accuracy"), 2,
                                                      BLOCK_ALL)}
    assert reasons["reward_without_accuracy"] == (
        "training reward +0.500 over 1 round(s) >= +0.050 while held-out accuracy +0.000 <= "
        "+0.000")
    leak = {a.name: a.reason for a in round_alarms(_fault("heldout_leak"), 2, BLOCK_ALL)}
    assert leak["heldout_leak"].startswith("a held-out question has 1.00 of its 50-character")
    novelty = {a.name: a for a in round_alarms(_fault("novelty_collapse"), 2, BLOCK_ALL)}
    assert novelty["novelty_collapse"].figures == {"alarm_proposer_novelty": 5 / 95}


def test_alarms_block_nothing_by_default_but_are_recorded():
    alarms = round_alarms(_fault("heldout_leak"), 2, AlarmsConfig())
    assert with_alarms(PROMOTED, alarms, AlarmsConfig()) == PROMOTED
    assert alarm_metrics(alarms)["alarm_heldout_leak"] == 1.0
    assert alarm_metrics(alarms)["alarm_heldout_overlap"] == 1.0
    assert AlarmsConfig.model_validate({}) == load_config(None).alarms


def test_an_already_rejected_candidate_keeps_its_reason_and_gains_the_alarms():
    rejected = Decision(False, "accuracy 0.200 < 0.300 - 0.000")
    decision = with_alarms(rejected, round_alarms(_fault("label_accuracy_drop"), 2, BLOCK_ALL),
                           BLOCK_ALL)
    assert not decision.promoted
    assert decision.reason.startswith(rejected.reason + "; alarm label_accuracy_drop: ")


def test_trends_without_both_rounds_are_not_measured():
    metrics = _fault("reward_without_accuracy")
    first = {a.name: a for a in round_alarms(metrics, 1, BLOCK_ALL)}  # round 0 is the warm-up
    assert not first["reward_without_accuracy"].measured
    assert not first["reward_without_accuracy"].fired
    assert "alarm_reward_without_accuracy" not in alarm_metrics(list(first.values()))
    wide = AlarmsConfig(window=2, block=BLOCK_ALL.block)
    assert not {a.name: a for a in round_alarms(metrics, 2, wide)}[
        "reward_without_accuracy"].measured
    no_votes = {k: v for k, v in metrics.items() if k[2] != "label_precision"}
    assert not {a.name: a for a in round_alarms(no_votes, 2, BLOCK_ALL)}[
        "label_accuracy_drop"].measured


def test_proposer_novelty_counts_the_proposers_valid_samples_only():
    proposals = pl.DataFrame({
        "source": ["proposer"] * 6 + ["generator"] * 4,
        "drop_reason": [None, "duplicate", "heldout", "near_duplicate", "invalid", "timeout",
                        None, None, None, None]})
    assert proposer_novelty(proposals) == 1 / 4
    assert proposer_novelty(proposals.filter(pl.col("source") == "generator")) is None


def test_heldout_overlap_finds_copies_not_shared_subexpressions():
    shares = heldout_overlap(HELDOUT[:3], pl.Series([domain.solver_prompt(HELDOUT[0]),
                                                     f"12+{HELDOUT[1]}", HELDOUT[2].upper()]))
    # a short question leaks only as a whole text (its problem text, case and spaces aside)
    assert shares.tolist() == [0.0, 0.0, 1.0]
    question = ("Alice has 12 apples and gives 5 of them to Bob, who already had 7 apples. "
                "How many apples does Bob have now? Answer with a number.")
    templated = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    rewritten = question.replace("12", "31").replace("5 of", "9 of").replace("7 apples", "2 pears")
    found = heldout_overlap([question], pl.Series([templated, rewritten]))
    assert found.tolist() == [1.0]
    assert heldout_overlap([question], pl.Series([rewritten]))[0] < 0.8


def test_a_tasks_template_shared_by_the_held_out_questions_is_no_leak():
    template = "spell_backward L1: Spell this word backward (example: sun -> nus): "
    heldout = [f"{template}{word}" for word in ("dud", "oak", "ray")]
    training = pl.Series([f"<solve>{template}{word} Answer: " for word in ("tree", "lamp")])
    # every held-out question is mostly template: only the n-grams with its word count
    assert heldout_overlap(heldout, training).tolist() == [0.0, 0.0, 0.0]
    # a held-out question in a training row still is (case and spaces aside)
    copied = heldout_overlap(heldout, pl.Series([f"<solve>{template}RAY Answer: "]))
    assert copied.tolist() == [0.0, 0.0, 1.0]
    # a lone question shares nothing with another: all its n-grams count, the template's
    # 8 of its 11 among them
    assert heldout_overlap(heldout[:1], training)[0] == pytest.approx(8 / 11)


# ---- the promote stage consults the alarms --------------------------------------------------


def _evals(tmp_path, name: str, correct: list[bool]) -> Evaluation:
    rows = [{"run_id": "r", "round": 1, "checkpoint": name, "item_id": f"h{i}", "level": 2,
             "prompt": "<solve>1+1=", "completion": "2", "answer": "2", "reference": "2",
             "correct": c, "reward": float(c), "method": "reference"}
            for i, c in enumerate(correct)]
    path = write_atomic("evals", rows, tmp_path / f"{name}.parquet").path
    return Evaluation({"accuracy": sum(correct) / len(correct)}, path, name * 32)


@pytest.mark.parametrize("block", [[], ["heldout_leak"]])
def test_the_promote_stage_consults_the_alarm_gate(tmp_path, block):
    ctx = RunContext(tmp_path, "r", load_config(None, {"alarms.block": block}))
    ctx.catalog.record_completed(run_id="r", round_index=1, stage="curate",
                                 fingerprint="c" * 32, started_at=time.time(), outputs=[],
                                 inputs={}, metrics={"heldout_overlap": 1.0})
    incumbent, candidate = Checkpoint(tmp_path, "a" * 32), Checkpoint(tmp_path, "b" * 32)
    incumbent_eval = _evals(tmp_path, "a", [True, False, False, False])
    candidate_eval = _evals(tmp_path, "b", [True, True, False, False])
    winner = promote.fn(ctx, 1, incumbent, incumbent_eval, candidate, candidate_eval)
    (decided,) = ctx.catalog.query("SELECT promoted, reason FROM rounds WHERE round = 1")
    metrics = ctx.catalog.round_metrics("r", 1)
    assert metrics[1, "promote", "alarm_heldout_leak"] == 1.0  # measured either way
    if block:
        assert winner == incumbent and not decided["promoted"]
        assert decided["reason"].startswith("accuracy 0.500 >= 0.250 - 0.000; alarm "
                                            "heldout_leak: a held-out question has 1.00")
    else:
        assert winner == candidate and decided["promoted"]
        assert decided["reason"] == "accuracy 0.500 >= 0.250 - 0.000"


def test_heldout_overlap_is_the_same_in_chunks(monkeypatch):
    import tasks.alarms

    training = pl.Series(["12+7", HELDOUT[5], None, "3*4-1", f" {HELDOUT[9]} "] * 3)
    whole = heldout_overlap(HELDOUT, training)
    monkeypatch.setattr(tasks.alarms, "LEAK_CHUNK_CHARS", 7)
    assert heldout_overlap(HELDOUT, training).tolist() == whole.tolist()
    assert sorted(i for i, share in enumerate(whole) if share) == [5, 9]
    assert heldout_overlap(HELDOUT[:2], pl.Series([], dtype=pl.String)).tolist() == [0.0, 0.0]
