"""Verifier error rates: the rates and their Wilson intervals on hand-made counts, the canaries
(drawn the same way in every process, never a held-out item or a round's problem), the rollout
stage sampling them after the round's own problems, the verify stage measuring the verifier's
false positives and negatives on them and the majority labels' precision and recall, and the
curate stage dropping them before anything is trained."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from configs import load_config
from configs.settings import DomainSettings, stage_settings
from domains.arithmetic import ArithmeticDomain
from models.rollout_types import Completion
from storage.audit.round_metrics import wilson_interval
from storage.datasets import read_rows, write_atomic
from tasks import rollout
from tasks.context import Checkpoint, RunContext
from tasks.curate import curate_round
from tasks.stage import StageOutput
from tasks.verifier_rates import (
    CANARY_STREAM,
    Confusion,
    canary_problems,
    confusion,
    error_rates,
    label_rates,
    round_canaries,
)
from tasks.verify import verdict_frame, verify_round

domain = ArithmeticDomain()
RUN = "canary-run"


def test_error_rates_are_shares_with_wilson_intervals():
    rates = error_rates(Confusion(true_positive=40, false_positive=3, false_negative=5,
                                  true_negative=52))
    assert rates["verifier_false_positive_rate"] == 3 / 55
    assert (rates["verifier_false_positive_low"], rates["verifier_false_positive_high"]) == (
        wilson_interval(3, 55))
    assert rates["verifier_false_negative_rate"] == 5 / 45
    assert rates["canary_negatives"] == 55 and rates["canary_positives"] == 45
    none_wrong = error_rates(Confusion(20, 0, 0, 0))
    assert none_wrong["verifier_false_negative_rate"] == 0.0
    assert none_wrong["verifier_false_negative_high"] == pytest.approx(0.1611, abs=1e-4)
    assert "verifier_false_positive_rate" not in none_wrong  # no negative canary: not measured


def test_confusion_leaves_unjudged_pairs_out_and_label_rates_follow_it():
    pairs = pl.DataFrame({"reward": [1.0, 1.0, 0.0, 1.0, None, 0.0, 1.0],
                          "truth": [1.0, 0.0, 1.0, 1.0, 1.0, None, 0.5]})
    counts = confusion(pairs)
    assert counts == Confusion(true_positive=2, false_positive=2, false_negative=1,
                               true_negative=0)  # a partial credit of 0.5 is no 1
    assert label_rates(counts) == {"label_reward_precision": 0.5,
                                   "label_reward_recall": 2 / 3}
    assert label_rates(Confusion(0, 0, 0, 4)) == {}


def test_canaries_are_deterministic_new_and_never_held_out():
    settings = DomainSettings.from_config(load_config(None))
    heldout = {p.text for p in domain.heldout(settings.domain.heldout_per_level)}
    taken = sorted(heldout)[:5] + ["12+7"]
    first = round_canaries(domain, settings, count=60, seed=3, problem_texts=taken)
    again = round_canaries(domain, settings, count=60, seed=3, problem_texts=taken)
    assert first.equals(again) and len(first) == 60
    texts = set(first["text"])
    assert len(texts) == 60 and not texts & heldout and not texts & set(taken)
    assert first["reference"].null_count() == 0
    assert set(first["level"]) == {2, 3, 4}  # domain.min_level..max_level, cycled
    assert not round_canaries(domain, settings, count=60, seed=4, problem_texts=taken).equals(
        first)
    # a generator with nothing new left gives what it has, not a repeat
    level_one = {domain.generate(random.Random(s), 1).text for s in range(2000)}
    few = canary_problems(domain, count=len(level_one) + 5, levels=[1], seed=0, exclude=set())
    assert len(few) <= len(level_one) and few["text"].n_unique() == len(few)


# ---- a round with canaries, through the stages' own computations ---------------------------

# round problem -> completions of its 4 samples, "R" = the reference, "W" = reference + 1
ROUND = {"2+3": "WWWR",   # the majority label is wrong: 3 false positives, 1 false negative
         "3+4": "RRWR"}   # the majority label is right
CANARIES = ["WWWR", "RRRW"]  # the canaries' samples, in order


def _answer(reference: str, mark: str) -> str:
    return reference if mark == "R" else str(int(reference) + 1)


@dataclass
class Round:
    ctx: RunContext
    problems: StageOutput
    rollouts: StageOutput
    canaries: pl.DataFrame


def _round(tmp_path, labels: str) -> Round:
    config = load_config(None, {"verify.canary": 2, "verify.labels": labels,
                                "curate.solver_targets": "verified",
                                "rollout.samples_per_problem": 4})
    ctx = RunContext(tmp_path, RUN, config)
    folder = tmp_path / "files"
    problems, proposals = [], []
    for text in ROUND:
        parsed = domain.parse(text)
        pid = f"p-{text}"
        proposals.append({"proposal_id": f"q-{text}", "run_id": RUN, "round": 1,
                          "prompt": "<propose>L2:", "text": text, "level": parsed.level,
                          "source": "proposer", "problem_id": pid, "drop_reason": None})
        problems.append({"problem_id": pid, "run_id": RUN, "round": 1, "text": text,
                         "reference": parsed.reference, "level": parsed.level,
                         "source": "proposer", "proposal_id": f"q-{text}"})
    canaries = round_canaries(ctx.domain, DomainSettings.from_config(config), count=2,
                              seed=ctx.stage_seed(CANARY_STREAM, 1), problem_texts=list(ROUND))
    marks = [*ROUND.values(), *CANARIES]
    rows = [*problems, *canaries.to_dicts()]
    rollouts = [{"rollout_id": f"r-{row['problem_id']}-{i}", "run_id": RUN, "round": 1,
                 "problem_id": row["problem_id"], "sample_index": i,
                 "prompt": domain.solver_prompt(row["text"]),
                 "completion": _answer(row["reference"], mark), "completion_tokens": 1,
                 "checkpoint": "c" * 32}
                for row, samples in zip(rows, marks, strict=True)
                for i, mark in enumerate(samples)]
    write_atomic("problems", problems, folder / "problems.parquet")
    write_atomic("proposals", proposals, folder / "proposals.parquet")
    write_atomic("rollouts", rollouts, folder / "rollouts.parquet")
    synthesized = StageOutput("synthesize", 1, "s" * 32, {
        "problems": folder / "problems.parquet", "proposals": folder / "proposals.parquet"}, True)
    rolled = StageOutput("rollout", 1, "r" * 32, {"rollouts": folder / "rollouts.parquet"}, True)
    return Round(ctx, synthesized, rolled, canaries)


INCUMBENT = Checkpoint(Path(), "c" * 32)  # judges nothing: the domain's own verifier


def _verified(r: Round) -> tuple[StageOutput, dict[str, float]]:
    settings = stage_settings(r.ctx.config, "verify", 1)
    result = verify_round(r.ctx, settings, r.ctx.config.scale, 1, r.problems, r.rollouts,
                          INCUMBENT, "v" * 32)
    out = StageOutput("verify", 1, "v" * 32, {"verdicts": result.datasets["verdicts"].path}, False)
    return out, result.metrics


def test_majority_labels_get_the_verifiers_error_rates_on_the_canaries(tmp_path):
    r = _round(tmp_path, "majority")
    verdicts, metrics = _verified(r)
    stored = pl.read_parquet(verdicts.path("verdicts"))
    assert len(stored) == 16 and set(stored["problem_id"][8:]) == set(r.canaries["problem_id"])
    assert metrics["verdicts"] == 8  # the round's own metrics leave the canaries out
    assert metrics["mean_reward"] == (3 + 3) / 8
    assert metrics["canary_problems"] == 2
    # canary 1: the wrong vote rewards 3 wrong answers (FP) and not the right one (FN);
    # canary 2: the right vote rewards 3 right answers (TP) and not the wrong one (TN)
    assert metrics["verifier_false_positive_rate"] == 3 / 4
    assert metrics["verifier_false_negative_rate"] == 1 / 4
    assert (metrics["verifier_false_positive_low"], metrics["verifier_false_positive_high"]) == (
        wilson_interval(3, 4))
    # the round's problems: the majority label rewarded 6 rollouts, 3 of them right; the
    # reference rewards 4, 3 of which the label rewarded
    assert metrics["label_reward_precision"] == 3 / 6
    assert metrics["label_reward_recall"] == 3 / 4
    assert metrics["label_precision"] == 1 / 2  # per problem: one of two votes is right


def test_reference_labels_are_the_known_answers_so_the_canary_rates_are_zero(tmp_path):
    _, metrics = _verified(_round(tmp_path, "reference"))
    assert metrics["verifier_false_positive_rate"] == 0.0
    assert metrics["verifier_false_negative_rate"] == 0.0
    assert metrics["canary_negatives"] == 4 and metrics["canary_positives"] == 4
    assert "label_reward_precision" not in metrics  # the labels are the references


def test_curate_drops_the_canaries_before_anything_is_trained(tmp_path):
    r = _round(tmp_path, "majority")
    verdicts, _ = _verified(r)
    settings = stage_settings(r.ctx.config, "curate", 1)
    with_canaries = curate_round(r.ctx.domain, settings, r.problems, r.rollouts, verdicts)
    # the same round judged without canaries: the round's own verdicts only
    plain = verdict_frame(r.ctx.domain, pl.read_parquet(r.rollouts.path("rollouts")).head(8),
                          pl.read_parquet(r.problems.path("problems")), "majority")
    alone = StageOutput("verify", 1, "w" * 32, {"verdicts": write_atomic(
        "verdicts", plain, tmp_path / "plain" / "verdicts.parquet").path}, False)
    without = curate_round(r.ctx.domain, settings, r.problems, r.rollouts, alone)
    rows = with_canaries.datasets["train_rows"]
    canary_ids = set(r.canaries["problem_id"])
    canary_rollouts = {f"r-{pid}-{i}" for pid in canary_ids for i in range(4)}
    assert len(rows) and not set(rows["problem_id"].drop_nulls()) & canary_ids
    assert not set(rows["rollout_id"].drop_nulls()) & canary_rollouts
    assert not set(with_canaries.datasets["curriculum"]["problem_id"]) & canary_ids
    assert rows.equals(without.datasets["train_rows"])
    assert with_canaries.metrics == without.metrics


class PositionBackend:
    """Answers each prompt with texts naming its position in the stage, the sample and the
    prompts its batch of `batch_size` sequences holds: as a real backend's padding does, a
    batch's company changes its answers."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def generate(self, prompts, params, progress=None):
        sequences = [(params.first_prompt + i, j) for i in range(len(prompts))
                     for j in range(params.n)]
        batches = [sequences[b:b + self.batch_size]
                   for b in range(0, len(sequences), self.batch_size)]
        company = {seq: sorted({p for p, _ in batch}) for batch in batches for seq in batch}
        return [[Completion(text=f"{p}.{j} with {company[(p, j)]}", tokens=1)
                 for j in range(params.n)]
                for p in range(params.first_prompt, params.first_prompt + len(prompts))]

    def close(self):
        pass


def _rollouts(tmp_path, monkeypatch, canary: int, *, engines: bool = False) -> list[dict]:
    """The rollout stage's rows of three problems (and `canary` canaries), sampled in process
    or (`engines`) on the run's vLLM engine actors, both replaced by a `PositionBackend`."""
    monkeypatch.setattr("models.backends.backend_for",
                        lambda rollout, *_: PositionBackend(rollout.batch_size))
    monkeypatch.setattr("models.vllm_actors.engine_actors_backend",
                        lambda rollout, *_, **__: PositionBackend(rollout.batch_size))
    config = load_config(None, {"verify.canary": canary, "rollout.samples_per_problem": 2,
                                "rollout.batch_size": 8})  # the last batch of 3 x 2 has room
    if engines:  # what `[scale] task_runner = "ray"` with `rollout.backend = "vllm"` reads
        config = config.model_copy(update={
            "rollout": config.rollout.model_copy(update={"backend": "vllm"}),
            "scale": config.scale.model_copy(update={"task_runner": "ray"})})
    ctx = RunContext(tmp_path / f"root-{canary}-{engines}", RUN, config)
    problems = [{"problem_id": f"p{i}", "run_id": RUN, "round": 1, "text": text,
                 "reference": domain.parse(text).reference, "level": 2, "source": "proposer",
                 "proposal_id": f"q{i}"} for i, text in enumerate(["2+3", "3+4", "5+6"])]
    path = write_atomic("problems", problems,
                        tmp_path / f"problems-{canary}-{engines}.parquet").path
    result = rollout.rollout_round(
        ctx, stage_settings(config, "rollout", 1), config.scale, 1,
        Checkpoint(tmp_path, "c" * 32), StageOutput("synthesize", 1, "s" * 32,
                                                    {"problems": path}, True), "f" * 32)
    return read_rows(result.datasets["rollouts"].path)


def test_the_rollout_samples_the_canaries_after_the_rounds_own_problems(tmp_path, monkeypatch):
    plain = _rollouts(tmp_path, monkeypatch, 0)
    mixed = _rollouts(tmp_path, monkeypatch, 3)
    assert len(plain) == 6 and len(mixed) == 12
    assert mixed[:6] == plain  # the round's own rollouts are those of a run without canaries
    config = load_config(None, {"verify.canary": 3})
    expected = round_canaries(domain, DomainSettings.from_config(config), count=3,
                              seed=RunContext(tmp_path, RUN, config).stage_seed(CANARY_STREAM, 1),
                              problem_texts=["2+3", "3+4", "5+6"])
    assert [r["problem_id"] for r in mixed[6:]] == [
        pid for pid in expected["problem_id"] for _ in range(2)]
    assert {r["prompt"] for r in mixed[6:]} == {domain.solver_prompt(t) for t in expected["text"]}
    # on the engine actors the same rows come back
    assert _rollouts(tmp_path, monkeypatch, 3, engines=True) == mixed
    assert _rollouts(tmp_path, monkeypatch, 0, engines=True) == plain


def test_canaries_rerun_rounds_from_one_on_and_share_the_warm_up():
    from tasks.fingerprints import stage_fingerprints

    before = stage_fingerprints(load_config(None))
    after = stage_fingerprints(load_config(None, {"verify.canary": 8}))
    assert all(before[stage, 0] == after[stage, 0]
               for stage in ("synthesize", "rollout", "verify", "curate", "train", "evaluate"))
    assert before["rollout", 1] != after["rollout", 1]
    assert before["verify", 1] != after["verify", 1]
    assert before["synthesize", 1] == after["synthesize", 1]


def test_status_and_the_report_show_the_rates_per_round():
    import duckdb

    from storage.audit.report import verifier_rates_table
    from storage.audit.round_summary import verifier_rate_lines

    base = {"round": None, "model": "base"}
    measured = {"round": 1, "model": "candidate", "verifier_fp": 0.75, "verifier_fp_low": 0.3,
                "verifier_fp_high": 0.954, "verifier_fn": 0.25, "verifier_fn_low": 0.046,
                "verifier_fn_high": 0.7, "label_reward_precision": 0.5,
                "label_reward_recall": None}
    lines = verifier_rate_lines([base, {"round": 0, "model": "candidate"}, measured])
    assert len(lines) == 3 and lines[0].startswith("verifier error rates per round")
    assert lines[2].split() == ["1", "0.750", "[0.300,", "0.954]", "0.250", "[0.046,",
                                "0.700]", "0.500", "-"]
    assert verifier_rate_lines([base, {"round": 1, "model": "candidate"}]) == []
    con = duckdb.connect()
    con.execute("CREATE TABLE metrics (round INTEGER, stage VARCHAR, name VARCHAR, value DOUBLE)")
    con.execute("INSERT INTO metrics VALUES (1, 'verify', 'verifier_false_positive_rate', 0.75),"
                " (1, 'verify', 'mean_reward', 0.5), (2, 'verify', 'label_reward_recall', 0.9)")
    table = verifier_rates_table(con)
    assert table.rows == [{"round": 1, "verifier_false_positive_rate": 0.75},
                          {"round": 2, "label_reward_recall": 0.9}]


def test_the_warm_up_has_no_canaries_and_no_rollout_rates(tmp_path):
    r = _round(tmp_path, "majority")
    own = write_atomic("rollouts", pl.read_parquet(r.rollouts.path("rollouts")).head(8),
                       tmp_path / "own" / "rollouts.parquet").path
    settings = stage_settings(r.ctx.config, "verify", 0)
    result = verify_round(r.ctx, settings, r.ctx.config.scale, 0, r.problems,
                          StageOutput("rollout", 0, "r" * 32, {"rollouts": own}, True), INCUMBENT,
                          "v" * 32)
    assert result.metrics["verdicts"] == 8 and "label_precision" in result.metrics
    assert not {k for k in result.metrics if k.startswith(("canary", "verifier_", "label_reward"))}
