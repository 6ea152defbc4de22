"""`flywheel reverify`: a finished run's stored rollouts and held-out answers judged again.

The run is built without a model: a question/answer file (`dataset` domain, answers compared by
math-verify by default) whose fractions are answered in other forms (`0.5` for `1/2`,
`\\frac{1}{2}`), rollouts and held-out answers replayed by a fake backend through the stages' own
functions (rollout_rows, eval_rows), and the real verify, curate and promote tasks (`.fn`) over
them, so the catalog holds what a run records. Re-judging with the run's own settings must
reproduce every stored verdict byte for byte; `verify.compare = "exact"` turns the decimal
answers wrong, and its counts are checked against the planted answers.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from configs import AlarmsConfig, PromoteConfig, load_config
from configs.settings import stage_settings
from flows.cli import app
from models.backends import SamplingParams
from models.rollout_types import Completion
from storage.datasets import read_rows
from storage.paths import run_folder
from tasks import evaluate, rollout, synthesize
from tasks.alarms import round_alarms
from tasks.context import Checkpoint, RunContext
from tasks.curate import curate
from tasks.evaluate import Evaluation, accuracy, eval_rows
from tasks.promote import promote
from tasks.reverify import promotion_changes, rejudged_metrics
from tasks.rollout import rollout_rows
from tasks.stage import StageResult, run_stage
from tasks.synthesize import admit
from tasks.verify import verify

RUN = "rejudged"
# Per round, question -> (reference, the four sampled answers). Under math-verify `0.5` = `1/2`
# and `0.75` = `3/4`; under `exact` only the same notation (`\frac{1}{2}` = `1/2`) passes.
ROUNDS = {
    0: {"What is one half?": ("1/2", ["\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{1/3}",
                                     "no idea"]),
        "What is 6 times 7?": ("42", ["\\boxed{42}", "42", "\\boxed{41}", "The answer is 42."])},
    1: {"What is 3 divided by 4?": ("3/4", ["\\boxed{0.75}", "\\boxed{3/4}", "\\boxed{1}",
                                           "\\boxed{0.75}"]),
        "What is 5 times 9?": ("45", ["\\boxed{45}", "45", "\\boxed{44}", "The answer is 45."])},
}
HELDOUT = {"What is one quarter?": "1/4", "What is two fifths?": "2/5", "What is 3 plus 4?": "7",
           "What is nine tenths?": "9/10"}
# The held-out answers of each model: the base model's in the references' notation (2 of 4
# right), round 0's candidate in decimals (4 of 4 under math, 1 under exact: its promotion
# flips), round 1's in the references' notation (4 of 4 either way).
ANSWERS = {"base": ["\\boxed{1/4}", "\\boxed{2/5}", "\\boxed{8}", "\\boxed{1}"],
           0: ["\\boxed{0.25}", "\\boxed{0.4}", "\\boxed{7}", "\\boxed{0.9}"],
           1: ["\\boxed{1/4}", "\\boxed{2/5}", "\\boxed{7}", "\\boxed{9/10}"]}


class ReplayBackend:
    """A rollout backend answering each prompt with the completions it was given."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    def generate(self, prompts, params, progress=None):
        return [[Completion(text=t, tokens=1) for t in self.answers[p]] for p in prompts]


def _jsonl(path: Path, rows: dict[str, str]) -> str:
    path.write_text("".join(json.dumps({"question": q, "answer": a, "level": 1}) + "\n"
                            for q, a in rows.items()))
    return str(path)


def _evaluated(ctx: RunContext, stage: str, round_index: int, checkpoint: Checkpoint,
               answers: list[str]) -> Evaluation:
    """The evaluate stage of `checkpoint` with its held-out answers replayed (eval_rows)."""
    items = ctx.domain.heldout(len(HELDOUT))
    backend = ReplayBackend({ctx.domain.solver_prompt(p.text): [a]
                             for p, a in zip(items, answers, strict=True)})

    def compute(_fingerprint: str) -> StageResult:
        rows = eval_rows(backend, ctx.domain, per_level=len(HELDOUT), max_new_tokens=8,
                         checkpoint=checkpoint.fingerprint, run_id=ctx.run_id,
                         round_index=round_index, items=items)
        return StageResult(datasets={"evals": rows}, metrics=accuracy(rows))

    out = run_stage(ctx, stage=stage, version=evaluate.VERSION, round_index=round_index,
                    settings=stage_settings(ctx.config, "evaluate", round_index),
                    inputs={"checkpoint": checkpoint.fingerprint}, compute=compute)
    rows = read_rows(out.path("evals"))
    return Evaluation(accuracy(rows), out.path("evals"), out.fingerprint)


def _round(ctx: RunContext, round_index: int, incumbent: Checkpoint,
           incumbent_eval: Evaluation, folder: Path) -> tuple[Checkpoint, Evaluation]:
    """One round through the stages' own functions; returns the incumbent afterwards."""
    domain, planted = ctx.domain, ROUNDS[round_index]
    proposals, problems = admit(domain, [("p", q) for q in planted], source="seed", seen=set(),
                                heldout=set(), run_id=RUN, round_index=round_index)
    synthesized = run_stage(
        ctx, stage="synthesize", version=synthesize.VERSION, round_index=round_index,
        settings=stage_settings(ctx.config, "synthesize", round_index), inputs={},
        compute=lambda _f: StageResult(datasets={"proposals": proposals, "problems": problems}))
    backend = ReplayBackend({domain.solver_prompt(q): answers for q, (_, answers)
                             in planted.items()})
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=0)
    rows = rollout_rows(backend, domain, problems, params=params,
                        checkpoint=incumbent.fingerprint, run_id=RUN, round_index=round_index)
    rolled = run_stage(
        ctx, stage="rollout", version=rollout.VERSION, round_index=round_index,
        settings=stage_settings(ctx.config, "rollout", round_index),
        inputs={"problems": synthesized.fingerprint, "checkpoint": incumbent.fingerprint},
        compute=lambda _f: StageResult(datasets={"rollouts": rows}))
    verdicts = verify.fn(ctx, round_index, synthesized, rolled, incumbent)
    curate.fn(ctx, round_index, synthesized, rolled, verdicts)
    candidate = Checkpoint(folder / f"candidate-{round_index}", f"{round_index + 1:x}" * 32)
    candidate.path.mkdir()
    candidate_eval = _evaluated(ctx, "evaluate", round_index, candidate, ANSWERS[round_index])
    winner = promote.fn(ctx, round_index, incumbent, incumbent_eval, candidate, candidate_eval)
    return winner, candidate_eval if winner == candidate else incumbent_eval


def _tree(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished two-round run (warm-up and round 1) in a fresh data root."""
    folder = tmp_path_factory.mktemp("reverify")
    pool = {q: ref for planted in ROUNDS.values() for q, (ref, _) in planted.items()}
    config = load_config(None, {
        "domain.name": "dataset", "domain.min_level": 1, "domain.max_level": 1,
        "domain.seed_max_level": 1, "domain.heldout_per_level": len(HELDOUT),
        "domain.dataset.paths": [_jsonl(folder / "qa.jsonl", pool)],
        "domain.dataset.heldout_path": _jsonl(folder / "heldout.jsonl", HELDOUT),
        "gates.enabled": False, "rounds": 1})
    data_root = folder / "data"
    ctx = RunContext(data_root=data_root, run_id=RUN, config=config)
    ctx.catalog.ensure_run(RUN, config.model_dump_json())
    incumbent = Checkpoint(folder / "base", "b" * 32)
    incumbent.path.mkdir()
    incumbent_eval = _evaluated(ctx, "baseline", 0, incumbent, ANSWERS["base"])
    for round_index in ROUNDS:
        incumbent, incumbent_eval = _round(ctx, round_index, incumbent, incumbent_eval, folder)
    ctx.catalog.set_run_status(RUN, "completed")
    stages = ctx.catalog.stage_rows(RUN)
    return {"data_root": data_root, "ctx": ctx, "files": _tree(run_folder(data_root, RUN)),
            "stages": stages}


def _reverify(run, *args: str):
    return CliRunner().invoke(app, ["reverify", RUN, *args, "--data-root", str(run["data_root"])])


def _records(run, *args: str) -> list[dict]:
    result = _reverify(run, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["rounds"]


def _untouched(run) -> None:
    """The run's own files (outside reverify/) and its stage rows are as the run left them."""
    now = {name: digest for name, digest in _tree(run_folder(run["data_root"], RUN)).items()
           if not name.startswith("reverify/")}
    assert now == run["files"]
    assert run["ctx"].catalog.stage_rows(RUN) == run["stages"]


def _stored(run, stage: str, round_index: int, kind: str) -> Path:
    fingerprint = [s["fingerprint"] for s in run["stages"]
                   if s["stage"] == stage and s["round"] == round_index][-1]
    return Path(run["ctx"].catalog.completed_datasets(RUN, fingerprint)[kind]["path"])


def test_the_runs_own_settings_reproduce_every_verdict_byte_for_byte(run):
    records = _records(run)
    assert [r["round"] for r in records] == [0, 1]
    for record in records:
        assert record["flipped"] == 0 and record["verdicts"] == 8 and record["examples"] == []
        assert (record["train_rows_gained"], record["train_rows_lost"],
                record["train_rows_changed"]) == (0, 0, 0)
        assert record["train_rows_after"] == record["train_rows_before"] > 0
        assert record["promotion_flipped"] is False
        assert record["candidate_accuracy_before"] == record["candidate_accuracy_after"]
        # verify's own metrics of the file come out as the stage recorded them
        assert record["verifier_after"] == record["verifier_before"]
        assert record["verifier_before"]["unjudged"] == 1.0 * (record["round"] == 0)
        assert record["alarms_before"] == record["alarms_after"] == []
        folder = run["data_root"] / record["path"]
        stored = _stored(run, "verify", record["round"], "verdicts")
        assert (folder / "verdicts.parquet").read_bytes() == stored.read_bytes()
        assert pl.read_parquet(folder / "verdicts.parquet")["reward"].to_list() == \
            pl.read_parquet(stored)["reward"].to_list()
    _untouched(run)


def test_exact_comparison_flips_the_decimal_answers_and_round_0s_promotion(run):
    records = _records(run, "--set", "verify.compare=exact")
    warmup, first = records
    # round 0: `0.5` for 1/2 falls (1 -> 0); `\frac{1}{2}`, `42` and "The answer is 42." stand
    assert (warmup["flipped"], warmup["reward_down"], warmup["reward_up"],
            warmup["to_unjudged"], warmup["to_judged"]) == (1, 1, 0, 0, 0)
    assert warmup["examples"] == [{
        "rollout_id": warmup["examples"][0]["rollout_id"], "answer_before": "0.5",
        "answer_after": "0.5", "label": "1/2", "reward_before": 1.0, "reward_after": 0.0,
        "method_after": "reference"}]
    # round 1: both `0.75` answers for 3/4 fall
    assert (first["flipped"], first["reward_down"]) == (2, 2)
    # round 1's verified answers lose those two rollouts' solver rows (the warm-up trains on
    # references, so its rows stay)
    assert (warmup["train_rows_gained"], warmup["train_rows_lost"]) == (0, 0)
    assert (first["train_rows_gained"], first["train_rows_lost"]) == (0, 2)
    assert first["train_rows_changed"] >= 1  # the 3/4 problem's proposer row: pass rate 3/4 -> 1/4
    # the decimal held-out answers of round 0's candidate: 4/4 -> 1/4, so it is no longer
    # promoted over the base model's 2/4
    assert (warmup["candidate_accuracy_before"], warmup["candidate_accuracy_after"]) == (1.0, 0.25)
    assert (warmup["incumbent_accuracy_before"], warmup["incumbent_accuracy_after"]) == (0.5, 0.5)
    assert (warmup["promoted_before"], warmup["promoted_after"],
            warmup["promotion_flipped"]) == (True, False, True)
    assert warmup["decision_after"] == "accuracy 0.250 < 0.500 - 0.000"
    assert (first["promoted_before"], first["promoted_after"]) == (True, True)
    assert (first["incumbent_accuracy_before"], first["incumbent_accuracy_after"]) == (1.0, 0.25)
    _untouched(run)
    # the rollout's lineage shows its stored verdict and the re-judged one beside it
    flipped = warmup["examples"][0]["rollout_id"]
    lineage = CliRunner().invoke(app, ["audit", RUN, "lineage", flipped, "--format", "json",
                                       "--data-root", str(run["data_root"])])
    assert lineage.exit_code == 0, lineage.output
    rows = json.loads(lineage.stdout)
    again = [r for r in rows if r["link"] == "judged again"]  # one per re-judging so far
    (exact,) = [r for r in again if warmup["fingerprint"][:12] in r["detail"]]
    assert exact["id"] == flipped and "reward=0.0 method=reference" in exact["detail"], rows
    assert all(r["id"] == flipped for r in again)


def test_the_printed_counts_are_the_records(run):
    result = _reverify(run, "--round", "1", "--set", "verify.compare=exact")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"run {RUN} judged again with verify.compare=exact"
    assert lines[1] == ("round 1: 2 of 8 verdicts flipped: 0 up (0->1), 2 down (1->0), "
                        "0 judged->unjudged, 0 unjudged->judged")
    assert "  train rows" in result.stdout and ": 0 gained, 2 lost," in result.stdout
    assert "  promotion: promoted -> promoted (unchanged): accuracy 1.000 >= 0.250" \
        in result.stdout
    assert not any(line.startswith("round 0") for line in lines)


def test_boxed_only_extraction_leaves_the_unboxed_answers_unjudged(run):
    warmup, _ = _records(run, "--set", 'verify.extract=["boxed"]')
    # `42` and "The answer is 42." had a reward of 1; without a \boxed{} they have none
    assert (warmup["to_unjudged"], warmup["reward_down"], warmup["flipped"]) == (2, 0, 2)
    assert {e["method_after"] for e in warmup["examples"]} == {"no_answer"}
    assert all(e["reward_after"] is None for e in warmup["examples"])


def test_majority_labels_rejudge_a_run_whose_curate_rationalizes(run):
    """The run's `curate.solver_targets = "rationalize"` refuses majority labels for training;
    judging its rollouts against their votes is still allowed."""
    warmup, _ = _records(run, "--set", "verify.labels=majority")
    verdicts = pl.read_parquet(run["data_root"] / warmup["path"] / "verdicts.parquet")
    assert set(verdicts["label"]) == {"0.5", "42"}  # the votes (a tie goes to the smallest)
    assert set(verdicts["method"]) == {"majority", "no_answer"}
    assert warmup["flipped"] == 0  # each vote is math-equal to its reference here


def test_majority_labels_measure_the_votes_against_the_references(run):
    """Reference labels record no label rates; judged against their votes, round 1's labels
    are measured against the references: both votes (0.75 for 3/4, 45) are right, so every
    rollout rewarded 1 is truly right and none truly right is missed."""
    _, first = _records(run, "--set", "verify.labels=majority")
    assert "label_reward_precision" not in first["verifier_before"]
    assert (first["verifier_after"]["label_reward_precision"],
            first["verifier_after"]["label_reward_recall"]) == (1.0, 1.0)
    printed = _reverify(run, "--round", "1", "--set", "verify.labels=majority").stdout
    assert "  label reward precision: - -> 1.000" in printed


def _evals(correct: list[bool]) -> list[dict]:
    return [{"item_id": f"i{k}", "level": 1, "sample": 0, "correct": c, "reward": float(c)}
            for k, c in enumerate(correct)]


def test_rejudged_metrics_replace_only_the_rounds_verify_curate_and_candidate_figures():
    stored = {(0, "verify", "mean_reward"): 0.2, (1, "verify", "mean_reward"): 0.5,
              (1, "verify", "label_precision"): 0.9, (1, "curate", "heldout_overlap"): 0.1,
              (1, "evaluate", "accuracy"): 0.4, (1, "synthesize", "proposed"): 8.0}
    after = rejudged_metrics(stored, 1, {"mean_reward": 0.7}, {"heldout_overlap": 0.2}, 0.35)
    assert after == {(0, "verify", "mean_reward"): 0.2, (1, "verify", "mean_reward"): 0.7,
                     (1, "curate", "heldout_overlap"): 0.2, (1, "evaluate", "accuracy"): 0.35,
                     (1, "synthesize", "proposed"): 8.0}  # label_precision: not measured now
    # no curate stage recomputed, no candidate: those stay as stored
    kept = rejudged_metrics(stored, 1, {}, None, None)
    assert kept[(1, "curate", "heldout_overlap")] == 0.1
    assert kept[(1, "evaluate", "accuracy")] == 0.4


def test_an_alarm_the_rejudged_figures_fire_blocks_the_promotion_and_one_they_clear_lifts_it():
    cfg = AlarmsConfig(block=["label_accuracy_drop"], max_label_accuracy_drop=0.1, window=1)
    stored = {(1, "verify", "label_precision"): 0.8, (2, "verify", "label_precision"): 0.8}
    rejudged = rejudged_metrics(stored, 2, {"label_precision": 0.5}, None, None)
    evals = (_evals([True, True, True, False]), _evals([True, False, False, False]))
    out = promotion_changes(evals, evals, PromoteConfig(), cfg,
                            (round_alarms(stored, 2, cfg), round_alarms(rejudged, 2, cfg)),
                            trainable_after=4)
    assert (out["promoted_before"], out["promoted_after"], out["promotion_flipped"]) == (
        True, False, True)
    assert (out["alarms_before"], out["alarms_after"]) == ([], ["label_accuracy_drop"])
    assert out["decision_after"] == ("accuracy 0.750 >= 0.250 - 0.000; alarm label_accuracy_drop: "
                                     "majority-label accuracy 0.800 -> 0.500 over 1 round(s): a "
                                     "drop of 0.300 >= 0.100")
    back = promotion_changes(evals, evals, PromoteConfig(), cfg,
                             (round_alarms(rejudged, 2, cfg), round_alarms(stored, 2, cfg)),
                             trainable_after=4)
    assert (back["promoted_before"], back["promoted_after"]) == (False, True)
    # an alarm that fires but is not blocking is reported and decides nothing
    loose = AlarmsConfig(max_label_accuracy_drop=0.1, window=1)
    free = promotion_changes(evals, evals, PromoteConfig(), loose,
                             (round_alarms(stored, 2, loose), round_alarms(rejudged, 2, loose)),
                             trainable_after=4)
    assert free["alarms_after"] == ["label_accuracy_drop"] and free["promoted_after"] is True


def test_the_same_setting_again_reuses_its_dataset(run):
    first = _records(run, "--round", "1", "--set", "verify.compare=exact")[0]
    folder = run["data_root"] / first["path"]
    files = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = _records(run, "--round", "1", "--set", "verify.compare=exact")[0]
    assert again["reused"] is True and again["fingerprint"] == first["fingerprint"]
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == files
    assert sorted(files) == ["evals.parquet", "verdicts.parquet"]
    assert {k: v for k, v in again.items() if k != "reused"} == \
        {k: v for k, v in first.items() if k != "reused"}
    other = _records(run, "--round", "1")[0]  # another setting: another dataset
    assert other["fingerprint"] != first["fingerprint"]
    recorded = run["ctx"].catalog.query(
        "SELECT round, kind, path FROM datasets WHERE stage = 'reverify' AND fingerprint = ?",
        [first["fingerprint"]])
    assert sorted((r["round"], r["kind"]) for r in recorded) == [(1, "evals"), (1, "verdicts")]
    assert all(r["path"].startswith(f"runs/{RUN}/reverify/") for r in recorded)


def test_json_keys_are_snake_case(run):
    result = _reverify(run, "--round", "0", "--json")
    payload = json.loads(result.stdout)
    keys = set(payload) | {k for r in payload["rounds"] for k in r}
    assert keys >= {"run_id", "sets", "rounds", "reward_up", "train_rows_gained",
                    "candidate_accuracy_after", "promotion_flipped"}
    assert all(key.islower() and " " not in key and "-" not in key for key in keys)


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "rollout.k=2"], "--set rollout.k: reverify changes only how answers are judged"),
    (["--set", "verify.canary=4"], "--set verify.canary: reverify changes only how answers"),
    (["--set", "verify.compare=fuzzy"], "verify.compare"),
    (["--set", "verify.nonsense=1"], "verify.nonsense"),
    (["--round", "7"], "round 7 has no completed verify stage"),
])
def test_a_bad_setting_or_round_is_one_line_and_exit_2(run, args, message):
    result = _reverify(run, *args)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert "Traceback" not in result.output


def test_an_unknown_or_hostile_run_id_is_one_line_and_exit_2(run):
    for run_id in ("nobody", "../x"):
        result = CliRunner().invoke(app, ["reverify", run_id, "--data-root",
                                          str(run["data_root"])])
        assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
