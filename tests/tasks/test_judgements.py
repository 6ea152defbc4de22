"""Judge calls are data (tasks/judgements.py): the verify and evaluate stages store every judge
prompt, reply, parsed reward and judge id, keyed by a hash of (judge, prompt), with the rollout
each judged; a resume asks the judge nothing again and reverify reproduces the round from the
stored replies.

The judge is tests/tasks/scripted_judge.py's; pairwise judging is
tests/tasks/test_pairwise_judgements.py, the GRPO reward's journal
tests/models/test_grpo_journal.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from configs import ScaleConfig, load_config
from domains import get_domain
from domains.judge_rows import model_judge_of, remember_stored
from models.rollout_types import Completion
from storage.catalog import Catalog
from storage.fingerprint import file_checksum
from tasks.judgements import cost_text, judgements_beside
from tasks.verify import stream_verdicts
from tests.tasks.scripted_judge import (
    ASKED,
    ArithmeticJudge,
    judged_config,
    judged_files,
)

ANSWERS = [("2+3", "5"), ("2+3", "5"), ("2+3", "6"), ("4*4", "16"), ("4*4", "<think>hmm"),
           ("7-9", "-2")]


def test_verify_stores_each_judged_rollouts_prompt_reply_and_reward(tmp_path, judge_folder):
    domain = get_domain("arithmetic", judged_config(judge_folder))
    paths = judged_files(tmp_path, ANSWERS)
    written = stream_verdicts(domain, ScaleConfig(), paths["rollouts"], paths["problems"],
                              "reference", tmp_path / "verdicts.parquet")
    assert sorted(written) == ["judgements", "verdicts"]
    assert written["judgements"].path == judgements_beside(written["verdicts"].path)
    verdicts = pl.read_parquet(written["verdicts"].path)
    judged = pl.read_parquet(written["judgements"].path)
    # the answer cut off while thinking has a verdict (thinking_unfinished) and no judgement
    assert verdicts.filter(pl.col("rollout_id") == "c4")["method"].to_list() == [
        "thinking_unfinished"]
    assert judged["rollout_id"].to_list() == ["c0", "c1", "c2", "c3", "c5"]
    assert judged["reply"].to_list() == ["PASS", "PASS", "FAIL", "PASS", "PASS"]
    both = judged.join(verdicts, on="rollout_id")
    assert both["reward"].to_list() == both["reward_right"].to_list() == [1.0, 1.0, 0.0, 1.0, 1.0]
    assert set(judged["judge"]) == set(verdicts["verifier"]) == {domain.verifier()}
    # the same answer to the same question is one prompt, one id, asked once
    assert judged["judgement_id"][0] == judged["judgement_id"][1] != judged["judgement_id"][2]
    assert "Question: 2+3=" in judged["prompt"][0] and "Answer: 5" in judged["prompt"][0]
    assert ArithmeticJudge.CALLS == [4]


def test_stored_judgements_answer_a_fresh_judge_with_no_call(tmp_path, judge_folder):
    paths = judged_files(tmp_path, ANSWERS)
    first = stream_verdicts(get_domain("arithmetic", judged_config(judge_folder)), ScaleConfig(),
                            paths["rollouts"], paths["problems"], "reference",
                            tmp_path / "a" / "verdicts.parquet")
    ArithmeticJudge.CALLS.clear()
    again = get_domain("arithmetic", judged_config(judge_folder))  # as reverify builds it
    judge = model_judge_of(again)
    assert remember_stored(judge, first["judgements"].path) == 4
    second = stream_verdicts(again, ScaleConfig(), paths["rollouts"], paths["problems"],
                             "reference", tmp_path / "b" / "verdicts.parquet")
    assert ArithmeticJudge.CALLS == []
    for kind in ("verdicts", "judgements"):  # the round reproduced byte for byte
        assert file_checksum(first[kind].path) == file_checksum(second[kind].path)
    assert judge.cost.calls == 0 and judge.cost.reused == 4
    # another judge (another template) has another id: the stored replies are not its own
    other = get_domain("arithmetic", judged_config(
        judge_folder, **{"verify.judge.template": "Q: {question}\n\nAnswer: {answer}\n\nOK?"}))
    assert remember_stored(model_judge_of(other), first["judgements"].path) == 0


def test_rubrics_are_written_once_per_question_stored_and_reused(tmp_path, judge_folder):
    config = judged_config(judge_folder, **{"verify.judge.rubrics": True})
    paths = judged_files(tmp_path, ANSWERS)
    first = stream_verdicts(get_domain("arithmetic", config), ScaleConfig(), paths["rollouts"],
                            paths["problems"], "reference", tmp_path / "a" / "verdicts.parquet")
    assert ArithmeticJudge.CALLS == [3, 4]  # the 3 questions' criteria, then the 4 prompts
    judged = pl.read_parquet(first["judgements"].path)
    by_question = dict(zip(judged["question"], judged["rubric"], strict=True))
    assert by_question["2+3="] == "1. The answer is the value of 2+3.\n2. A bare integer."
    assert judged.group_by("question").agg(pl.col("rubric").n_unique())["rubric"].max() == 1
    for prompt, rubric in zip(judged["prompt"], judged["rubric"], strict=True):
        assert f"Rubric: {rubric}" in prompt
    assert judged["reply"].to_list() == ["PASS", "PASS", "FAIL", "PASS", "PASS"]  # as before

    ArithmeticJudge.CALLS.clear()  # reverify's way: the stored criteria and replies, no call
    again = get_domain("arithmetic", config)
    remember_stored(model_judge_of(again), first["judgements"].path)
    second = stream_verdicts(again, ScaleConfig(), paths["rollouts"], paths["problems"],
                             "reference", tmp_path / "b" / "verdicts.parquet")
    assert ArithmeticJudge.CALLS == []
    assert file_checksum(first["judgements"].path) == file_checksum(second["judgements"].path)
    # criteria are part of the judge's id: the rubric-free judge's stored replies are not these
    assert model_judge_of(again).describe() != model_judge_of(
        get_domain("arithmetic", judged_config(judge_folder))).describe()


@pytest.mark.parametrize(("judge", "message"), [
    ({"rubrics": True, "rubric": "Be exact."}, "the judge writes each question's criteria"),
    ({"rubrics": True, "template": "Q: {question} A: {answer} Score:"}, "must hold {rubric}"),
    ({"rubrics": True, "rubric_template": "Criteria for {task}:"}, "only the placeholder"),
])
def test_rubric_settings_that_cannot_work_are_config_errors(judge, message):
    from configs import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, {"verify.compare": "judge",
                           **{f"verify.judge.{k}": v for k, v in judge.items()}})


def test_the_judges_cost_is_in_the_stage_line(caplog):
    from tasks.stage import log_stage

    metrics = {"judge_prompts": 96, "judge_calls": 3, "judge_seconds": 1.234,
               "judge_reply_tokens": 412, "judge_reused": 0}
    assert cost_text(metrics) == ("judge 96 prompts in 3 calls, 1.2 s, 412 reply tokens, "
                                  "0 reused")
    assert cost_text({"verdicts": 10}) == ""
    with caplog.at_level("INFO", logger="flywheel"):
        log_stage(1, "verify", "completed in 2.0 s", {"verdicts": 8, "judgements": 7},
                  cost_text(metrics))
    assert caplog.messages[-1] == (
        "round 1 verify: completed in 2.0 s; rows verdicts=8 judgements=7; judge 96 prompts in "
        "3 calls, 1.2 s, 412 reply tokens, 0 reused")


@pytest.mark.slow
def test_a_judged_round_stores_judgements_resumes_and_reverifies_with_no_call(
        tmp_path, prefect_server, judge_folder):
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.run import RunSpec, flywheel_flow

    config = judged_config(judge_folder, **{
        "domain.seed_problems": 40, "domain.heldout_per_level": 3,
        "rollout.samples_per_problem": 4, "rollout.batch_size": 64, "train.batch_size": 16,
        "train.warmup.max_steps": 3, "train.max_steps": 2, "synthesize.source": "generator",
        "synthesize.proposals": 48, "rounds": 1, "train.algorithm": "grpo",
        "curate.solver_targets": "verified"})
    root = tmp_path / "data"
    spec = RunSpec(data_root=str(root), run_id="judged", config=config)
    flywheel_flow(spec)
    asked = sum(ArithmeticJudge.CALLS)
    catalog = Catalog(root)
    stored = catalog.query("SELECT round, stage, rows FROM datasets WHERE run_id = 'judged' AND"
                           " kind = 'judgements' ORDER BY round, stage")
    assert {(r["round"], r["stage"]) for r in stored} >= {(0, "verify"), (1, "verify"),
                                                          (1, "train"), (1, "evaluate")}
    trained = catalog.query(  # the GRPO reward's judgements: 2 steps of 16 completions
        "SELECT count(*) AS n, count(DISTINCT rollout_id) AS ids, min(rollout_id) AS first"
        " FROM judgements WHERE run_id = 'judged' AND round = 1 AND rollout_id LIKE 'grpo/%'")[0]
    assert 0 < trained["n"] == trained["ids"] <= 2 * 16 and trained["first"].startswith("grpo/")
    grpo_cost = {r["name"]: r["value"] for r in catalog.query(
        "SELECT name, value FROM metrics WHERE run_id = 'judged' AND round = 1 AND"
        " stage = 'train' AND name LIKE 'judge_%'")}
    assert grpo_cost["judge_prompts"] > 0
    lineage = catalog.query(
        "SELECT count(*) AS n, count(r.rollout_id) AS linked, sum(CASE WHEN j.reward = v.reward"
        " THEN 1 ELSE 0 END) AS same FROM judgements j LEFT JOIN rollouts r USING (rollout_id)"
        " JOIN verdicts v USING (rollout_id) WHERE j.run_id = 'judged' AND j.round = 1")[0]
    assert lineage["n"] > 0 and lineage["linked"] == lineage["same"] == lineage["n"]
    metrics = {r["name"]: r["value"] for r in catalog.query(
        "SELECT name, value FROM metrics WHERE run_id = 'judged' AND round = 1 AND"
        " stage = 'verify'")}
    assert metrics["judge_prompts"] > 0 and metrics["judge_calls"] >= 1

    ArithmeticJudge.CALLS.clear()
    flywheel_flow(spec)  # a resume recomputes nothing and asks the judge nothing
    assert ArithmeticJudge.CALLS == []

    result = CliRunner().invoke(app, ["reverify", "judged", "--json", "--data-root", str(root)])
    assert result.exit_code == 0, result.output
    assert ArithmeticJudge.CALLS == [], "reverify asked the judge again"
    for record in json.loads(result.stdout)["rounds"]:
        assert record["flipped"] == 0 and record["judge_calls"] == 0
        assert record["judge_reused"] > 0
    assert asked > 0

    shown = CliRunner().invoke(app, ["status", "judged", "--data-root", str(root)])
    assert shown.exit_code == 0, shown.output
    block = shown.stdout[shown.stdout.index("judge cost per round"):].splitlines()
    cost = {tuple(line.split()[:2]): line.split()[2:] for line in block[2:] if line.strip()}
    assert cost[("1", "verify")][0] == f"{metrics['judge_prompts']:.0f}"
    assert ("1", "evaluate") in cost and ("0", "verify") in cost
    assert cost[("1", "train")][0] == f"{grpo_cost['judge_prompts']:.0f}"  # the GRPO reward's

    # judge quality in the audit: its scores and its agreement with the references
    audited = CliRunner().invoke(app, ["audit", "judged", "verifier", "--round", "1",
                                       "--data-root", str(root)])
    assert audited.exit_code == 0, audited.output
    text = " ".join(audited.stdout.split())
    judged = re.search(r"round 1 judge (\S+): (\d+) answers, (\d+) prompts, unparseable "
                       r"([\d.]+) scores ((?:[\d.]+x\d+ ?)+) agrees with the references on "
                       r"([\d.]+) of (\d+) \(passes a wrong answer (\d+), fails a right one "
                       r"(\d+)\)", text)
    assert judged, text
    judge_id, answers, prompts, unparseable, scores, agree, checked, wrong, right = judged.groups()
    given = dict(pair.split("x") for pair in scores.split())
    assert set(given) <= {"0.000", "1.000"}  # pass_fail
    assert sum(map(int, given.values())) == int(answers)  # every reply was PASS or FAIL
    assert int(prompts) == metrics["judge_prompts"] and float(unparseable) == 0.0
    from storage.audit.report import write_report  # the report's judge section, the same lines

    page = write_report(root, "judged", tmp_path / "report").read_text()
    assert "<h2>LLM judge</h2>" in page and f"{answers} answers, {prompts} prompts" in page
    checked_rows = int(checked)
    disagree = int(wrong) + int(right)
    assert abs(float(agree) - (checked_rows - disagree) / checked_rows) < 1e-3


class SelfJudging:
    """A checkpoint's backend in a self-judged run: the judge's prompts (the pass_fail
    template) get `reply` (recorded in ArithmeticJudge.CALLS), the solver's go to the
    checkpoint's real sampler."""

    def __init__(self, real) -> None:
        self.real = real

    @staticmethod
    def reply(prompt: str) -> str:
        """A judge unlike the fixed one, so its verdicts show: PASS for an answer of odd length
        (the random model's answers get both)."""
        return "PASS" if len(ASKED.search(prompt)["answer"]) % 2 else "FAIL"

    def generate(self, prompts, params, progress=None):
        if prompts and all("Decide whether the answer" in p for p in prompts):
            ArithmeticJudge.CALLS.append(len(prompts))
            return [[Completion(text=self.reply(p), tokens=2)] for p in prompts]
        return self.real.generate(prompts, params, progress)

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.mark.slow
def test_the_incumbent_judges_its_rounds_answers_and_the_fixed_judge_the_held_out(
        tmp_path, prefect_server, judge_folder, monkeypatch):
    """`[verify.judge] incumbent = true`: each round's verdicts and judgements name that
    round's incumbent (its fingerprint), the held-out evals the fixed judge; a resume asks no
    judge, and reverify rebuilds each round's judge from the catalog and asks it nothing."""
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.run import RunSpec, flywheel_flow
    from models import backends
    from tests.models.chat_model import build_chat_model

    model = build_chat_model(tmp_path / "model")
    routed = backends.make_backend  # judge_folder's: the fixed judge scripted

    def make_backend(name, checkpoint, **options):
        built = routed(name, checkpoint, **options)
        return built if Path(checkpoint) == judge_folder else SelfJudging(built)

    monkeypatch.setattr(backends, "make_backend", make_backend)
    config = judged_config(judge_folder, **{
        "model.path": str(model), "verify.judge.incumbent": True, "warmup.mode": "none",
        "domain.heldout_per_level": 3, "rollout.samples_per_problem": 2,
        "rollout.max_new_tokens": 8, "evaluate.max_new_tokens": 8, "train.batch_size": 8,
        "train.max_steps": 2, "synthesize.source": "generator", "synthesize.proposals": 24,
        "curate.solver_targets": "reference", "promote.margin": 1.0, "rounds": 2})
    root = tmp_path / "data"
    spec = RunSpec(data_root=str(root), run_id="self", config=config)
    flywheel_flow(spec)
    catalog = Catalog(root)
    incumbents = [r["incumbent"] for r in catalog.query(
        "SELECT incumbent FROM rounds WHERE run_id = 'self' AND round >= 1 ORDER BY round")]
    assert len(set(incumbents)) == 2, "round 1's candidate was to be promoted (margin 1.0)"
    fixed = model_judge_of(get_domain("arithmetic", config)).describe()
    for r, incumbent in enumerate(incumbents, start=1):
        verifiers = {row["verifier"] for row in catalog.query(
            "SELECT DISTINCT verifier FROM verdicts WHERE run_id = 'self' AND round = ?", [r])}
        (own,) = verifiers  # the round's incumbent, by fingerprint, with the fixed one's settings
        assert own.startswith(f"judge[incumbent@{incumbent[:16]}:pass_fail:")
        judges = catalog.query("SELECT DISTINCT judge, contains(rollout_id, '/') AS held_out"
                               " FROM judgements WHERE run_id = 'self' AND round = ?", [r])
        # verify's judged by the incumbent; evaluate's (<item_id>/<sample>) by the fixed judge
        assert {(row["judge"], row["held_out"]) for row in judges} == {(own, False),
                                                                       (fixed, True)}
        replies = catalog.query("SELECT prompt, reply FROM judgements WHERE run_id = 'self' AND"
                                " round = ? AND judge = ?", [r, verifiers.pop()])
        assert replies and all(row["reply"] == SelfJudging.reply(row["prompt"])
                               for row in replies)
        inputs = catalog.query("SELECT inputs_json FROM stages WHERE run_id = 'self' AND"
                               " round = ? AND stage = 'verify'", [r])[0]["inputs_json"]
        assert json.loads(inputs)["judge"] == incumbent

    ArithmeticJudge.CALLS.clear()
    flywheel_flow(spec)  # a resume recomputes nothing and asks no judge
    assert ArithmeticJudge.CALLS == []
    result = CliRunner().invoke(app, ["reverify", "self", "--json", "--data-root", str(root)])
    assert result.exit_code == 0, result.output
    assert ArithmeticJudge.CALLS == [], "reverify asked a judge again"
    records = json.loads(result.stdout)["rounds"]
    assert [r["round"] for r in records] == [1, 2]
    assert all(r["flipped"] == 0 and r["judge_calls"] == 0 and r["judge_reused"] > 0
               for r in records)


def test_a_self_judge_needs_a_model_that_can_judge(judge_folder):
    from domains.base import DomainInputError

    with pytest.raises(DomainInputError, match="incumbent = true needs model.path"):
        get_domain("arithmetic", judged_config(judge_folder, **{"verify.judge.incumbent": True}))
