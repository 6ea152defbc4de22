"""STaR's rationalization with a hint (`curate.rationalize_with = "hint"`, tasks/rationalize.py):
a too-hard problem is asked again with its answer as a hint, and the answers that reach the
reference are trained on the question without the hint, their rows leading back to the hint.

The rows are checked as pure functions; a run on the tiny CPU model, with a scripted backend in
place of the sampler (the tiny model cannot read a hint), shows the stage in the round, its data
in the catalog, lineage from a training row to its hinted prompt, and a resume that reuses it."""

from __future__ import annotations

import re
import zlib

import pytest

from configs import ConfigError, load_config
from configs.settings import asks_hints
from domains import get_domain
from models.rollout_types import Completion
from storage.catalog import Catalog
from tasks.fingerprints import stage_graph
from tasks.rationalize import hinted_text

HINT = load_config(None, {"curate.rationalize_with": "hint"})


def test_hint_mode_adds_a_stage_between_verify_and_curate_that_curate_reads():
    fingerprints, reads = stage_graph(HINT, rounds=1)
    assert ("rationalize", 1) in fingerprints and ("rationalize", 0) not in fingerprints
    assert reads["rationalize", 1] == {("synthesize", 1), ("verify", 1), ("train", 0)}
    assert ("rationalize", 1) in reads["curate", 1]
    plain, _ = stage_graph(load_config(None), rounds=1)
    assert not any(stage == "rationalize" for stage, _ in plain)
    assert asks_hints(HINT, 1) and not asks_hints(HINT, 0)


def test_the_hint_is_the_template_filled_with_what_the_reference_teaches():
    domain = get_domain("arithmetic")
    problem = {"text": "37+5", "reference": "42"}
    assert hinted_text(domain, HINT.curate.hint_template, problem) == (
        "37+5\n\nHint: the answer is 42. Show the reasoning that reaches it.")
    assert hinted_text(domain, "{question} ({answer}?)", problem) == "37+5 (42?)"


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"curate.hint_template": "Hint: {answer}"}, "exactly {question} and {answer}"),
    ({"curate.hint_template": "{question} {answer} {extra}"}, "hint_template"),
    ({"curate.rationalize_with": "hint", "curate.solver_targets": "verified"},
     "solver_targets"),
])
def test_bad_hint_settings_are_config_errors_naming_the_key(overrides, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_config(None, overrides)


def _problem(pid, text, reference, level=1):
    return {"problem_id": pid, "run_id": "r", "round": 1, "text": text, "reference": reference,
            "level": level, "source": "proposer", "proposal_id": f"q-{pid}", "task": None,
            "payload": None}


def test_too_hard_problems_train_the_hinted_answers_that_reached_the_reference_unhinted():
    from tasks.curate import curriculum_rows, training_frame

    domain = get_domain("arithmetic")
    problems = [_problem("easy", "1+1", "2"), _problem("hard", "9*9", "81"),
                _problem("never", "8*7", "56")]
    rollouts, verdicts = [], []
    for pid, rewards in (("easy", (1, 0)), ("hard", (0, 0)), ("never", (0, 0))):
        text = next(p["text"] for p in problems if p["problem_id"] == pid)
        for sample, reward in enumerate(rewards):
            rid = f"{pid}-{sample}"
            rollouts.append({"rollout_id": rid, "problem_id": pid, "sample_index": sample,
                             "prompt": domain.solver_prompt(text), "completion": "2" if reward
                             else "0"})
            verdicts.append({"rollout_id": rid, "problem_id": pid, "reward": float(reward)})
    hinted_rollouts = [
        {"rollout_id": f"h-{pid}-{i}", "problem_id": pid, "sample_index": i,
         "prompt": domain.solver_prompt(f"{pid} with its hint"), "completion": answer}
        for pid, answers in (("hard", ("80", "81", "81")), ("never", ("1", "2", "3")))
        for i, answer in enumerate(answers)]
    hinted_verdicts = [{"rollout_id": r["rollout_id"], "problem_id": r["problem_id"],
                        "reward": float(r["completion"] == "81")} for r in hinted_rollouts]
    curation = load_config(None, {"curate.rationalize_with": "hint",
                                  "curate.max_answers_per_problem": 4,
                                  "curate.rationalize_ratio": 10.0}).curate
    curriculum = curriculum_rows(problems, verdicts, curation, warmup=False, warmup_max_level=1)
    rows = training_frame(domain, problems, rollouts, verdicts, curriculum, curation,
                          warmup=False, hinted=(hinted_rollouts, hinted_verdicts)).to_dicts()
    solver = [(r["problem_id"], r["rollout_id"], r["prompt"], r["completion"]) for r in rows
              if r["role"] == "solver"]
    assert solver == [("easy", "easy-0", domain.solver_prompt("1+1"), "2"),
                      ("hard", "h-hard-1", domain.solver_prompt("9*9"), "81"),
                      ("hard", "h-hard-2", domain.solver_prompt("9*9"), "81")]
    # the same round with references: the too-hard problems train their references instead
    references = training_frame(domain, problems, rollouts, verdicts, curriculum,
                                curation.model_copy(update={"rationalize_with": "reference"}),
                                warmup=False).to_dicts()
    assert [(r["problem_id"], r["rollout_id"], r["completion"]) for r in references
            if r["role"] == "solver"] == [("easy", "easy-0", "2"), ("hard", None, "81"),
                                         ("never", None, "56")]


class HintReader:
    """A scripted sampler for the arithmetic domain: an unhinted prompt is answered correctly in
    the first half of its samples for about two thirds of the problems and never for the rest
    (too hard); a hinted one with its hint, but wrongly for about a third of the problems."""

    def __init__(self, *_):
        self.hinted_prompts = 0

    def generate(self, prompts, params, progress=None):
        out = []
        for prompt in prompts:
            text = prompt.removeprefix("<solve>").split("\n", 1)[0].split("<unk>", 1)[0]
            text = text.rstrip("=")
            bucket = zlib.crc32(text.encode()) % 3
            hint = re.search(r"the answer is (-?\d+)", prompt)
            if hint:
                self.hinted_prompts += 1
                wrong = zlib.adler32(text.encode()) % 3 == 0
                answers = ["-1" if wrong else hint.group(1)] * params.n
            elif "<solve>" in prompt and bucket != 0:
                right = str(eval(text))  # noqa: S307 - the domain's own +, -, * expressions
                answers = [right if i < params.n // 2 else "-1" for i in range(params.n)]
            else:
                answers = ["-1"] * params.n
            out.append([Completion(text=a, tokens=len(a) + 1) for a in answers])
            if progress is not None:
                progress(params.n)
        return out

    def close(self):
        pass


@pytest.mark.slow
def test_a_hinted_round_on_the_tiny_model_stores_lineage_and_resumes(tmp_path, prefect_server,
                                                                      monkeypatch):
    from flows.run import RunSpec, flywheel_flow
    from models import backends

    monkeypatch.setattr(backends, "backend_for", HintReader)
    config = load_config(None, {
        "domain.seed_problems": 40, "domain.heldout_per_level": 3, "rollout.samples_per_problem":
        4, "rollout.batch_size": 64, "train.batch_size": 16, "train.warmup.max_steps": 3,
        "train.max_steps": 2, "synthesize.source": "generator", "synthesize.proposals": 48,
        "rounds": 1, "curate.rationalize_with": "hint", "curate.rationalize_ratio": 10.0})
    spec = RunSpec(data_root=str(tmp_path), run_id="hint", config=config)
    flywheel_flow(spec)
    catalog = Catalog(tmp_path)
    stages = catalog.query("SELECT stage, status FROM stages WHERE run_id = 'hint' AND round = 1")
    assert ("rationalize", "completed") in {(s["stage"], s["status"]) for s in stages}
    metrics = {r["name"]: r["value"] for r in catalog.query(
        "SELECT name, value FROM metrics WHERE run_id = 'hint' AND round = 1 AND stage IN "
        "('rationalize', 'curate')")}
    assert metrics["hinted_problems"] > 0 and metrics["rationalized_problems"] > 0
    assert metrics["rationalized_problems"] < metrics["hinted_problems"]  # a third stay wrong
    assert metrics["rationalized_rows"] == metrics["rationales"]  # max 4 a problem, 4 samples

    trained = catalog.query(
        "SELECT t.prompt AS trained, r.prompt AS sampled, t.completion, v.reward, p.reference"
        " FROM train_rows t JOIN rollouts r USING (rollout_id) JOIN verdicts v USING"
        " (rollout_id) JOIN problems p ON p.problem_id = t.problem_id AND p.run_id = t.run_id"
        " AND p.round = t.round WHERE t.run_id = 'hint' AND t.round = 1 AND t.role = 'solver'"
        " AND r.prompt LIKE '%Hint: the answer is%'")
    assert len(trained) == metrics["rationalized_rows"]
    for row in trained:
        assert "Hint" not in row["trained"] and row["trained"] != row["sampled"]
        assert row["reward"] == 1.0 and row["completion"] == row["reference"]
    reference_rows = catalog.query("SELECT count(*) AS n FROM train_rows WHERE run_id = 'hint'"
                                   " AND round = 1 AND role = 'solver' AND rollout_id IS NULL")
    assert reference_rows[0]["n"] == 0  # no bare references in a hinted round

    flywheel_flow(spec)  # a resume recomputes nothing, the hinted samples included
    runs = catalog.query("SELECT count(*) AS n FROM stages WHERE run_id = 'hint'"
                         " AND stage = 'rationalize' AND status = 'completed'")
    assert runs[0]["n"] == 1

    # reverify re-judges the round and rebuilds its rows from the stored hinted answers
    import json

    from typer.testing import CliRunner

    from flows.cli import app

    result = CliRunner().invoke(app, ["reverify", "hint", "--json", "--data-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (record,) = [r for r in json.loads(result.stdout)["rounds"] if r["round"] == 1]
    assert record["train_rows_changed"] == 0 and record["train_rows_lost"] == 0
    assert record["train_rows_after"] == record["train_rows_before"]

    # the training row's lineage shows the hint its answer was sampled with
    row_id = catalog.query("SELECT t.train_row_id FROM train_rows t JOIN rollouts r USING"
                           " (rollout_id) WHERE t.run_id = 'hint' AND r.prompt LIKE"
                           " '%Hint:%' LIMIT 1")[0]["train_row_id"]
    shown = CliRunner().invoke(app, ["audit", "hint", "lineage", row_id, "--format", "json",
                                     "--data-root", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "Hint: the answer is" in shown.output
