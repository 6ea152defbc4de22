"""The python_io domain: levels, generator, admission with recorded reasons, prompts, scoring."""

from __future__ import annotations

import ast
import json
import random

import pytest

from configs import ConfigError, load_config
from domains import get_domain
from domains.base import problem_row
from domains.programs import TEMPLATES, level_of
from domains.python_io import PythonIODomain
from tests.domains.labels import labelled

ALL_MODES = {"deduction": 1.0, "abduction": 1.0, "induction": 1.0}


@pytest.fixture(scope="module")
def domain():
    config = load_config(None, {"domain.name": "python_io", "domain.modes": ALL_MODES,
                                "sandbox.cpu_seconds": 0.5, "sandbox.wall_seconds": 1.0})
    built = get_domain("python_io", config)
    yield built
    built.pool.close()


@pytest.mark.parametrize(("program", "level"), [
    ("def f(x): return x*3+1", 1), ("def f(x): return abs(x-2)", 2),
    ("def f(x): return x if x>1 else 0", 2), ("def f(s): return s[::-1]", 3),
    ("def f(s): return s.upper()", 3), ("def f(x): return [i for i in x]", 4),
    ("def f(x): y=x; return y", 5), ("def f(x): return (lambda y: y)(x)", 5),
    ("def f(x): return " + "+".join(["x"] * 40), 2),  # arithmetic, but long: one level up
])
def test_level_comes_from_the_program(program, level):
    assert level_of(ast.parse(program)) == level


def test_every_template_has_the_level_it_is_filed_under():
    for level, templates in TEMPLATES.items():
        for template, _ in templates:
            program = template.format(a=3, b=4, c=5, i=1)
            assert level_of(ast.parse(program)) == level, program


def test_generated_problems_have_their_level_and_parse_back_to_themselves(domain):
    rng = random.Random(0)
    for level in domain.levels:
        for _ in range(6):
            problem = domain.generate(rng, level)
            assert problem.level == level
            assert domain.parse(problem.text) == problem
    assert {domain.generate(rng, 1).text.split(":")[0] for _ in range(60)} == set(ALL_MODES)


def test_the_heldout_set_is_fixed_and_spans_every_mode_of_the_run_and_every_level(domain):
    first, second = domain.heldout(3), domain.heldout(3)
    assert first == second and len(first) == 45 and len({p.text for p in first}) == 45
    assert {(domain.task_of(p.text), p.level) for p in first} == {
        (mode, level) for mode in ALL_MODES for level in domain.levels}
    deduction_only = PythonIODomain(load_config(None, {"domain.name": "python_io"}))
    try:  # a deduction-only run keeps its held-out set, the first third of this one
        assert deduction_only.heldout(3) == first[:15]
    finally:
        deduction_only.pool.close()


class _RightSolver:
    """A RolloutBackend that answers each held-out prompt correctly, except the first one."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def generate(self, prompts, params, progress=None):
        from models.backends import Completion

        return [[Completion("wrong" if i == 0 else self.answers[p], 2)] for i, p in
                enumerate(prompts)]


def test_heldout_accuracy_is_reported_per_mode_and_level(domain):
    from tasks.evaluate import accuracy, eval_rows, heldout_tasks

    items = domain.heldout(1)  # deduction level 1 first, the one answered wrong
    backend = _RightSolver({domain.solver_prompt(p.text): _right_answer(p) for p in items})
    rows = eval_rows(backend, domain, per_level=1, max_new_tokens=8, checkpoint="c",
                     run_id="r", round_index=1)
    metrics = accuracy(rows, heldout_tasks(domain, 1))
    assert metrics["accuracy_task_deduction_level_1"] == 0.0
    assert metrics["accuracy_task_deduction"] == 0.8
    assert metrics["accuracy_task_abduction"] == metrics["accuracy_task_induction"] == 1.0
    assert metrics["accuracy_task_induction_level_5"] == 1.0
    assert metrics["accuracy"] == pytest.approx(14 / 15)


def _right_answer(problem) -> str:
    """A correct solver completion for a held-out problem: its output, its input or its program."""
    mode, rest = problem.text.split(": ", 1)
    program, first_call = rest.split(" >>> ")[:2]
    if mode == "deduction":
        return problem.reference
    if mode == "abduction":
        return first_call.split(" == ")[0].removeprefix("f(")
    return program


@pytest.mark.parametrize(("proposal", "reason"), [
    ("", "empty"), ("37+5", "malformed"), ("deduction: def g(x): return x >>> f(1)", "malformed"),
    ("deduction: def f(x): return x >>> f(1) >>> f(2)", "malformed"),  # deduction: one call
    ("induction: def f(x): return x >>> f(1)", "malformed"),  # induction: two or more
    ("deduction: def f(x): return x >>> f(y)", "malformed"),  # inputs are literals
    ("deduction: import os\ndef f(x): return os.getpid() >>> f(1)", "forbidden"),
    ("deduction: def f(x): return open('/etc/passwd').read() >>> f(1)", "forbidden"),
    ("deduction: def f(x): return ().__class__ >>> f(1)", "forbidden"),
    ("deduction: def f(x):\n    while True: pass >>> f(1)", "timeout"),
    ("deduction: def f(x): return [0]*10**9 >>> f(1)", "memory"),
    ("deduction: def f(x): return x/0 >>> f(1)", "crash"),
    ("deduction: def f(x): return 'x'*10**5 >>> f(1)", "output_limit"),
    ("deduction: def f(x): return id(x) >>> f(1)", "nondeterministic"),
    ("deduction: import random\ndef f(x): return random.random() >>> f(1)", "nondeterministic"),
    ("deduction: def f(x): return 'x'*200 >>> f(1)", "too_long"),
])
def test_refused_proposals_carry_their_reason(domain, proposal, reason):
    assert domain.parse(proposal).reason == reason


def test_outputs_written_by_the_proposer_are_recomputed(domain):
    problem = domain.parse("deduction: def f(x): return x*3+1 >>> f(4) == 99")
    assert problem.text == "deduction: def f(x): return x*3+1 >>> f(4) == 13"
    assert problem.reference == "13"


def test_solver_prompts_show_only_what_the_mode_allows(domain):
    deduction = domain.parse("deduction: def f(x): return x*3+1 >>> f(4)")
    abduction = domain.parse("abduction: def f(x): return x*3+1 >>> f(4)")
    induction = domain.parse("induction: def f(x): return x*3+1 >>> f(1) >>> f(2) >>> f(5)"
                             " >>> f(0)")
    assert domain.solver_prompt(deduction.text).endswith("f(4) == ")
    assert "13" not in domain.solver_prompt(deduction.text)
    assert "f(4)" not in domain.solver_prompt(abduction.text)
    assert "== 13" in domain.solver_prompt(abduction.text)
    shown = domain.solver_prompt(induction.text)
    assert "def f" not in shown and "f(2) == 7" in shown and "f(5)" not in shown
    assert json.loads(induction.reference)["calls"] == ["(5,)", "(0,)"]


def test_deduction_answers_compare_as_values(domain):
    scores = domain.score(["13", " 13\n", "13.0", "14", ""], labelled(["13"] * 5))
    assert scores == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert domain.score(["[1,2]", "{'b': 1, 'a': 2}"],
                        labelled(["[1, 2]", "{'a': 2, 'b': 1}"])) == [1.0, 1.0]
    assert domain.score(["13"], labelled([None])) == [None]


def test_abduction_accepts_any_input_that_gives_the_output(domain):
    problem = domain.parse("abduction: def f(x): return x%3 >>> f(7)")  # f(7) == 1
    judged = domain.judge(["7)", "4)", "1", "5)", "f(", "open('x')"], [problem_row(problem)] * 6)
    assert [(j.reward, j.outcome) for j in judged] == [
        (1.0, "ok"), (1.0, "ok"), (1.0, "ok"), (0.0, "ok"), (0.0, None), (0.0, None)]


def test_induction_runs_the_written_function_on_the_hidden_calls(domain):
    problem = domain.parse("induction: def f(x): return x*3+1 >>> f(1) >>> f(2) >>> f(5)"
                           " >>> f(0)")
    answers = ["def f(x): return 3*x+1", "def f(x): return 3*x+1 if x < 3 else 0",
               "def f(x): return open('/root/.ssh/id_rsa')", "def f(x):\n    while True: pass",
               "def g(x): return 3*x+1", "def f(x): return 7"]
    judged = domain.judge(answers, [problem_row(problem)] * len(answers))
    assert [(j.reward, j.outcome) for j in judged] == [
        (1.0, "ok"), (0.0, "ok"), (0.0, "forbidden"), (0.0, "timeout"), (0.0, None), (0.0, "ok")]


def test_synthesize_records_why_programs_failed_as_drop_reasons(domain):
    from tasks.synthesize import admit

    texts = ["deduction: def f(x): return x+1 >>> f(1)",
             "deduction: def f(x): return 1/0 >>> f(1)",
             "deduction: def f(x):\n    while 1: pass >>> f(1)", "not a program",
             "deduction: def f(x): return id(x) >>> f(1)",
             "deduction: def f(x): return x+1 >>> f(1)"]
    proposals, problems = admit(domain, [("<propose>L1:", t) for t in texts], source="proposer",
                                seen=set(), heldout=set(), run_id="r", round_index=1)
    assert [p["drop_reason"] for p in proposals] == [None, "crash", "timeout", "invalid",
                                                     "nondeterministic", "duplicate"]
    assert [p["reference"] for p in problems] == ["2"]


def test_the_domain_pickles_without_its_processes(domain):
    import pickle

    copy = pickle.loads(pickle.dumps(domain))
    assert copy.pool._workers == [] and copy.parse("deduction: def f(x): return -x >>> f(2)")
    copy.pool.close()


@pytest.mark.parametrize(("text", "needle"), [
    ("[domain]\nname = 'python_io'\nmodes = { deduction = 0, abduction = 0, induction = 0 }",
     "not all 0"),
    ("[domain]\nmodes = { deduction = 1 }", "give deduction, abduction and induction"),
    ("[sandbox]\ncpu_seconds = 3\nwall_seconds = 1", "wall_seconds = 1.0 must be >= cpu_seconds"),
    ("[sandbox]\nisolation = 'none'", "`sandbox.isolation` = 'none'"),
    ("[sandbox]\nmemory_mb = 1", "`sandbox.memory_mb` = 1"),
])
def test_bad_python_io_settings_name_the_key(tmp_path, text, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=None) as info:
        load_config(path)
    assert needle in str(info.value)


def test_the_sandbox_is_part_of_the_domain_settings():
    from configs.settings import DomainSettings

    python_io = load_config(None, {"domain.name": "python_io", "sandbox.cpu_seconds": 0.5})
    assert DomainSettings.from_config(python_io).sandbox == python_io.sandbox
    assert isinstance(get_domain("python_io"), PythonIODomain)


def _rollouts(problems: list[dict], completions: dict[str, list[str]]) -> list[dict]:
    return [{"rollout_id": f"{p['problem_id']}-{i}", "run_id": "r", "round": 1,
             "problem_id": p["problem_id"], "sample_index": i, "prompt": "<solve>",
             "completion": completion, "completion_tokens": 1, "checkpoint": "c"}
            for p in problems for i, completion in enumerate(completions[p["text"].split(":")[0]])]


def _record(data_root, stage: str, rows_by_kind: dict[str, list[dict]]) -> None:
    import time

    from storage.catalog import Catalog
    from storage.datasets import dataset_path, write_atomic

    catalog = Catalog(data_root)
    catalog.ensure_run("r", "{}")
    fingerprint = f"{stage:0<16}"
    outputs = [write_atomic(kind, rows, dataset_path(data_root, "r", 1, kind, fingerprint))
               for kind, rows in rows_by_kind.items()]
    catalog.record_completed(run_id="r", round_index=1, stage=stage, fingerprint=fingerprint,
                             started_at=time.time(), outputs=outputs, inputs={})


def test_verdicts_record_the_sandbox_outcome_and_drops_counts_the_failures(domain, tmp_path):
    from configs import GatesConfig
    from storage.audit.answer import answer
    from storage.audit.snapshot import open_run
    from storage.datasets import write_atomic
    from tasks.synthesize import admit
    from tasks.verify import verdict_rows
    from validators.gate import run_gate

    texts = ["deduction: def f(x): return x*3+1 >>> f(4)",
             "abduction: def f(x): return x%3 >>> f(7)",
             "induction: def f(x): return x*3+1 >>> f(1) >>> f(2) >>> f(5) >>> f(0)",
             "deduction: def f(x):\n    while 1: pass >>> f(1)"]
    proposals, problems = admit(domain, [("<propose>L1:", t) for t in texts], source="proposer",
                                seen=set(), heldout=set(), run_id="r", round_index=1)
    completions = {"deduction": ["13", "12"], "abduction": ["4)", "5)", "f("],
                   "induction": ["def f(x): return 3*x+1", "def f(x):\n    while True: pass",
                                 "def f(x): return open('/etc/passwd')", "def f(x): return 1/x"]}
    verdicts = verdict_rows(domain, _rollouts(problems, completions), problems)
    assert [(v["reward"], v["outcome"]) for v in verdicts] == [
        (1.0, None), (0.0, None),  # deduction compares text: nothing ran
        (1.0, "ok"), (0.0, "ok"), (0.0, None),  # abduction runs the input; "f(" does not parse
        (1.0, "ok"), (0.0, "timeout"), (0.0, "forbidden"), (0.0, "crash")]

    _record(tmp_path, "synthesize", {"proposals": proposals, "problems": problems})
    _record(tmp_path, "verify", {"verdicts": verdicts})
    gate = run_gate(dataset_path_of(tmp_path, "verdicts"), "verdicts", GatesConfig(), run_id="r")
    assert gate.success, [(f.name, f.frame) for f in gate.failures]
    unknown = write_atomic("verdicts", [dict(verdicts[0], outcome="exploded")],
                           tmp_path / "unknown.parquet")
    assert [f.name for f in run_gate(unknown.path, "verdicts", GatesConfig()).failures] == [
        "expect_column_values_to_be_in_set(outcome)"]
    drops = answer(open_run(tmp_path, "r"), "drops", [])
    by_reason = {(r["dataset"], r["reason"]): r for r in drops.rows}
    assert by_reason[("proposals", "timeout")]["count"] == 1
    assert {reason: r["count"] for (dataset, reason), r in by_reason.items()
            if dataset == "verdicts"} == {"timeout": 1, "forbidden": 1, "crash": 1}
    assert by_reason[("verdicts", "timeout")]["share"] == pytest.approx(1 / 6)  # of 6 run
    assert by_reason[("verdicts", "crash")]["examples"] == ["def f(x): return 1/x"]


def dataset_path_of(data_root, kind: str):
    (path,) = (data_root / "runs" / "r" / "round-001").glob(f"{kind}-*.parquet")
    return path


def test_other_domains_leave_the_outcome_null():
    from domains.arithmetic import ArithmeticDomain
    from tasks.verify import verdict_rows

    problems = [{"problem_id": "p", "text": "2+2", "reference": "4"}]
    rollouts = [{"rollout_id": "x", "run_id": "r", "round": 1, "problem_id": "p",
                 "completion": "4"}]
    (row,) = verdict_rows(ArithmeticDomain(), rollouts, problems)
    assert row["reward"] == 1.0 and row["outcome"] is None


def test_the_training_target_of_each_reference_is_a_right_answer(domain):
    items = domain.heldout(2)
    targets = [domain.training_target(p.reference) for p in items]
    assert domain.score(targets, [problem_row(p) for p in items]) == [1.0] * len(items)
    assert targets == [_right_answer(p) for p in items]
