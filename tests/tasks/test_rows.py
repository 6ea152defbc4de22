"""GRPO prompt rows and DPO pairs as curate builds them (tasks/curriculum/selection.py), the
split of a round's rows between trainers, and the train stage's dispatch (with fake trainers:
tests/models/test_grpo.py and test_dpo.py train for real)."""

import json

import pytest

from configs import CurateConfig, load_config
from domains.arithmetic import ArithmeticDomain
from models import dpo, grpo, trainer
from models.trainer import TrainResult
from storage.datasets import dataset_path, to_table, write_atomic
from tasks.context import Checkpoint, RunContext
from tasks.curate import curriculum_rows, training_rows
from tasks.rows import split_for
from tasks.stage import StageOutput
from tasks.train import train

domain = ArithmeticDomain()
BAND = CurateConfig(min_pass_rate=0.0, max_pass_rate=1.0, solver_targets="verified")
SOLVER_ONLY = CurateConfig(min_pass_rate=0.0, max_pass_rate=1.0, solver_targets="verified",
                           proposer_rows=False)


def _problem(pid, text, reference, level=1):
    return {"problem_id": pid, "run_id": "r", "round": 1, "text": text, "reference": reference,
            "level": level, "source": "proposer", "proposal_id": "q" + pid}


def _round(answers, references=None):
    """problems, rollouts, verdicts from {problem_id: (text, [answers])}; reward vs reference
    (None = unjudged answer)."""
    references = references or {}
    problems, rollouts, verdicts = [], [], []
    for pid, (text, outs) in answers.items():
        reference = references.get(pid, str(eval(text)))  # test data only: plain literals
        problems.append(_problem(pid, text, reference))
        for i, out in enumerate(outs):
            rid = f"{pid}{i}"
            rollouts.append({"rollout_id": rid, "problem_id": pid, "sample_index": i,
                             "prompt": domain.solver_prompt(text), "completion": out})
            reward = None if out is None or reference is None else float(out == reference)
            verdicts.append({"rollout_id": rid, "problem_id": pid, "reward": reward})
    return problems, rollouts, verdicts


def _solver_rows(problems, rollouts, verdicts, kept, algorithm, max_pairs=4):
    """The solver rows curate builds for `algorithm` when the problems in `kept` are kept."""
    curriculum = [{"problem_id": p["problem_id"], "kept": p["problem_id"] in kept}
                  for p in problems]
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, SOLVER_ONLY,
                         warmup=False, algorithm=algorithm, max_pairs_per_problem=max_pairs)
    assert all(r["role"] == "solver" for r in rows)
    to_table("train_rows", rows)  # the stored schema, exactly
    return rows


@pytest.mark.parametrize(
    ("verdict_labels", "references", "expected"),
    [
        # no label column: references
        ({}, {"a": "2", "b": "4"}, {"a": "2", "b": "4"}),
        ({"a": "3"}, {"a": "2", "b": "4"}, {"a": "3", "b": "4"}),       # majority label wins
        ({"a": None}, {"a": "2", "b": None}, {"a": "2"}),               # neither: no label
        ({"b": "5"}, {"a": None, "b": None}, {"b": "5"}),               # label-free problems
    ],
)
def test_grpo_labels_come_from_verdicts_then_references(verdict_labels, references, expected):
    problems = [_problem("a", "1+1", references["a"]), _problem("b", "2+2", references["b"])]
    verdicts = [{"problem_id": pid, "rollout_id": pid + "0", "reward": 1.0, "label": label}
                for pid, label in verdict_labels.items()]
    # row without the column
    verdicts.append({"problem_id": "a", "rollout_id": "a9", "reward": 1.0})
    rows = _solver_rows(problems, [], verdicts, {"a", "b"}, "grpo")
    assert {r["problem_id"]: r["completion"] for r in rows} == expected


@pytest.mark.parametrize(
    ("kept", "references", "expected"),
    [
        ({"a", "b", "c"}, ("2", "4", "9"), [("a", "2"), ("b", "4"), ("c", "9")]),
        ({"b"}, ("2", "4", "9"), [("b", "4")]),
        ({"a", "b"}, (None, "4", "9"), [("b", "4")]),                     # a has no label
        (set(), ("2", "4", "9"), []),
    ],
)
def test_grpo_rows_are_one_labelled_prompt_per_kept_problem(kept, references, expected):
    problems = [_problem(pid, text, reference)
                for pid, text, reference in zip("abc", ("1+1", "2+2", "3*3"), references,
                                                strict=True)]
    rows = _solver_rows(problems, [], [], kept, "grpo")
    assert [(r["problem_id"], r["completion"]) for r in rows] == expected
    for r in rows:
        assert r["prompt"] == domain.solver_prompt(next(p["text"] for p in problems
                                                        if p["problem_id"] == r["problem_id"]))
        assert ((r["role"], r["weight"], r["rollout_id"], r["rejected"])
                == ("solver", 1.0, None, None))
        assert r["proposal_id"] == "q" + r["problem_id"]


@pytest.mark.parametrize(
    ("answers", "max_pairs", "expected"),
    [
        (["4", "5", "4", "1"], 4, [("b0", "4", "5"), ("b2", "4", "1")]),   # sample order, zipped
        (["4", "5", "4", "1"], 1, [("b0", "4", "5")]),                     # capped
        # one wrong answer: one pair
        (["5", "4", "4", "4"], 4, [("b1", "4", "5")]),
        (["4", "4"], 4, []),                                               # no wrong answer
        # unjudged in neither list
        (["5", None, "4"], 4, [("b2", "4", "5")]),
    ],
)
def test_dpo_pairs_chosen_verified_rejected_wrong(answers, max_pairs, expected):
    problems, rollouts, verdicts = _round({"b": ("2+2", answers)})
    rows = _solver_rows(problems, rollouts, verdicts, {"b"}, "dpo", max_pairs=max_pairs)
    assert [(r["rollout_id"], r["completion"], r["rejected"]) for r in rows] == expected
    assert all(r["prompt"] == "<solve>2+2=" and r["role"] == "solver" for r in rows)
    assert len({r["train_row_id"] for r in rows}) == len(rows)


def test_dpo_pairs_follow_sample_order_not_storage_order():
    problems, rollouts, verdicts = _round({"b": ("2+2", ["4", "5", "4", "1"])})
    rows = _solver_rows(problems, rollouts[::-1], verdicts[::-1], {"b"}, "dpo")
    assert [(r["rollout_id"], r["completion"], r["rejected"]) for r in rows] == [
        ("b0", "4", "5"), ("b2", "4", "1")]


def _graded(rewards: list[float | None]):
    """One problem whose i-th answer is "a<i>" with reward `rewards[i]` (a judge's scores)."""
    problems, rollouts, verdicts = _round({"b": ("2+2", [f"a{i}" for i in range(len(rewards))])})
    for verdict, reward in zip(verdicts, rewards, strict=True):
        verdict["reward"] = reward
    return problems, rollouts, verdicts


@pytest.mark.parametrize(
    ("rewards", "margin", "expected"),
    [
        # best against worst, then second best against second worst, while the gap holds
        ([0.5, 1.0, 0.0, 0.75, 0.25], 0.5, [("a1", "a2"), ("a3", "a4")]),
        ([0.5, 1.0, 0.0, 0.75, 0.25], 0.25, [("a1", "a2"), ("a3", "a4")]),  # a0 vs a0: no pair
        ([0.5, 1.0, 0.0, 0.75, 0.25], 1.0, [("a1", "a2")]),
        # a judge's 1-10 scale: (s - 1) / 9 gaps are not exact in binary and still pair
        ([(9 - 1) / 9, (6 - 1) / 9, None], 3 / 9, [("a0", "a1")]),  # scores 9 and 6
        ([7 / 9, 4 / 9, None, 1 / 9], 3 / 9, [("a0", "a3")]),  # a1 would pair with itself
        ([0.5, 0.5, 0.5], 0.1, []),                                         # all tied
        ([None, 0.9], 0.1, []),                                             # one judged answer
    ],
)
def test_dpo_pairs_from_graded_rewards_keep_the_margin(rewards, margin, expected):
    rows = training_rows(domain, *_graded(rewards),
                         [{"problem_id": "b", "kept": True}], SOLVER_ONLY, warmup=False,
                         algorithm="dpo", min_pair_margin=margin)
    assert [(r["completion"], r["rejected"]) for r in rows] == expected


def test_dpo_pairs_with_the_default_margin_are_verified_against_wrong_with_partial_credit():
    """Margin 1 (the default) pairs reward 1 with reward 0 only, as before graded pairs."""
    rows = training_rows(domain, *_graded([1.0, 0.5, 0.0, 1.0, 0.5, 1.0]),
                         [{"problem_id": "b", "kept": True}], SOLVER_ONLY, warmup=False,
                         algorithm="dpo")
    assert [(r["completion"], r["rejected"]) for r in rows] == [("a0", "a2")]


def test_dpo_pairs_only_for_kept_problems():
    problems, rollouts, verdicts = _round({"a": ("1+1", ["2", "3"]), "b": ("2+2", ["4", "5"])})
    rows = _solver_rows(problems, rollouts, verdicts, {"b"}, "dpo")
    assert [r["problem_id"] for r in rows] == ["b"]


def test_unknown_algorithm_names_the_choices():
    with pytest.raises(ValueError, match="train.algorithm = 'ppo'; choose 'sft', 'grpo' or 'dpo'"):
        training_rows(domain, [], [], [], [], BAND, warmup=False, algorithm="ppo")
    with pytest.raises(ValueError, match="choose 'sft', 'grpo' or 'dpo'"):
        split_for("ppo", [])


@pytest.mark.parametrize(
    ("algorithm", "solver"),
    [
        ("sft", [("b0", "4", None), ("b2", "4", None)]),
        ("grpo", [(None, "4", None)]),
        ("dpo", [("b0", "4", "5"), ("b2", "4", "1")]),
    ],
)
def test_curate_dispatches_solver_rows_on_the_algorithm(algorithm, solver):
    problems, rollouts, verdicts = _round({"a": ("1+1", ["2", "2"]),
                                          "b": ("2+2", ["4", "5", "4", "1"]),
                                          "c": ("3*3", ["1", "2"])})
    curriculum = curriculum_rows(problems, verdicts, BAND, warmup=False)
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, BAND, warmup=False,
                         algorithm=algorithm, max_pairs_per_problem=4)
    assert [(r["rollout_id"], r["completion"], r["rejected"])
            for r in rows if r["role"] == "solver"] == solver
    assert [(r["role"], r["completion"]) for r in rows
            if r["role"] == "proposer"] == [("proposer", "2+2")]
    to_table("train_rows", rows)


@pytest.mark.parametrize("algorithm", ["grpo", "dpo"])
def test_warmup_is_sft_on_references_whatever_the_algorithm(algorithm):
    problems, rollouts, verdicts = _round({"a": ("1+1", []), "b": ("2+2", [])})
    curriculum = curriculum_rows(problems, verdicts, BAND, warmup=True, warmup_max_level=2)
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, BAND, warmup=True,
                         algorithm=algorithm)
    solver = [(r["completion"], r["rejected"]) for r in rows if r["role"] == "solver"]
    assert solver == [("2", None), ("4", None)]


def _row(role, completion, rejected=None, round_index=1):
    return {"role": role, "prompt": "p", "completion": completion, "rejected": rejected,
            "weight": 1.0, "round": round_index}


@pytest.mark.parametrize(
    ("algorithm", "main", "rest"),
    [
        ("sft", ["s", "r0", "d", "p"], []),
        ("grpo", ["s", "r0", "d"], ["p"]),      # replayed warm-up references are GRPO prompts too
        ("dpo", ["d"], ["s", "r0", "p"]),       # rows without a pair go to the SFT pass
    ],
)
def test_split_for_routes_rows_the_algorithm_cannot_train_to_sft(algorithm, main, rest):
    rows = [_row("solver", "s"), _row("solver", "r0", round_index=0), _row("solver", "d", "x"),
            _row("proposer", "p")]
    got_main, got_rest = split_for(algorithm, rows)
    assert [r["completion"] for r in got_main] == main
    assert [r["completion"] for r in got_rest] == rest


@pytest.fixture
def stage_inputs(tmp_path):
    """A round-1 train stage over one GRPO prompt row, one DPO pair and one proposer row."""
    def make(algorithm, round_index=1, proposer_algorithm="sft"):
        config = load_config(None, {"rounds": 1, "train.algorithm": algorithm,
                                    "train.batch_size": 8,
                                    "curate.solver_targets": "verified",
                                    "train.proposer.algorithm": proposer_algorithm,
                                    "train.replay_proposer_rows": True,
                                    "train.replay_ratio": 0.0, "gates.enabled": False})
        ctx = RunContext(data_root=tmp_path, run_id="r", config=config)
        base = {"run_id": "r", "round": round_index, "weight": 1.0, "proposal_id": "q"}
        rows = [
            {**base, "train_row_id": "t0", "role": "solver", "prompt": "<solve>1+1=",
             "completion": "2", "rejected": None, "problem_id": "a", "rollout_id": None},
            {**base, "train_row_id": "t1", "role": "solver", "prompt": "<solve>2+2=",
             "completion": "4", "rejected": "5", "problem_id": "b", "rollout_id": "b0"},
            {**base, "train_row_id": "t2", "role": "proposer", "prompt": "<propose>L1:",
             "completion": "1+1", "rejected": None, "problem_id": "a", "rollout_id": None},
        ]
        path = write_atomic("train_rows", rows,
                            dataset_path(tmp_path, "r", round_index, "train_rows",
                                         algorithm * 8)).path
        curated = StageOutput("curate", round_index, algorithm * 8, {"train_rows": path},
                              skipped=False)
        return (ctx, round_index, Checkpoint(path=tmp_path / "incumbent", fingerprint="b" * 32),
                curated)
    return make


def _fake(name, calls, rewards=()):
    def fake(**kwargs):
        calls.append((name, kwargs["base"].name, [r["completion"] for r in kwargs["rows"]],
                      kwargs.get("reward") is not None))
        kwargs["out_dir"].mkdir(parents=True)
        (kwargs["out_dir"] / "model.safetensors").write_text(json.dumps(calls[-1]))
        return TrainResult(steps=2, final_loss=0.5, mean_loss=0.5, trained_tokens=10,
                           rewards=rewards)
    return fake


@pytest.mark.parametrize(
    ("algorithm", "round_index", "expected"),
    [
        ("grpo", 1, [("grpo", "incumbent", ["2", "4"], True),
                     ("sft", "model-grpo", ["1+1"], False)]),
        ("dpo", 1, [("dpo", "incumbent", ["4"], False), ("sft", "model-dpo", ["2", "1+1"], False)]),
        ("sft", 1, [("sft", "incumbent", ["2", "4", "1+1"], False)]),
        ("grpo", 0, [("sft", "incumbent", ["2", "4", "1+1"], False)]),   # warm-up: always SFT
    ],
)
def test_train_stage_dispatches_on_the_algorithm(stage_inputs, monkeypatch, algorithm, round_index,
                                                 expected):
    calls = []
    monkeypatch.setattr(trainer, "train_sft", _fake("sft", calls))
    monkeypatch.setattr(grpo, "train_grpo", _fake("grpo", calls, rewards=(0.25, 0.25, 0.5, 0.75)))
    monkeypatch.setattr(dpo, "train_dpo", _fake("dpo", calls))
    checkpoint = train.fn(*stage_inputs(algorithm, round_index), [])
    assert calls == expected
    assert json.loads((checkpoint.path / "model.safetensors").read_text()) == list(expected[-1])


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("sft", [("sft", "incumbent", ["2", "4"], False), ("grpo", "model-sft", ["1+1"], True)]),
        ("dpo", [("dpo", "incumbent", ["4"], False), ("grpo", "model-dpo", ["1+1"], True),
                 ("sft", "model-proposer-grpo", ["2"], False)]),
    ],
)
def test_proposer_grpo_pass_trains_the_proposer_rows_against_the_incumbent_solver(
        stage_inputs, monkeypatch, algorithm, expected):
    from models import backends

    calls, solvers = [], []

    class Solver:
        def __init__(self, rollout, checkpoint):
            solvers.append(checkpoint.name)

        def close(self):
            solvers.append("closed")

    monkeypatch.setattr(backends, "backend_for", Solver)
    monkeypatch.setattr(trainer, "train_sft", _fake("sft", calls))
    monkeypatch.setattr(grpo, "train_grpo", _fake("grpo", calls, rewards=(0.0, 0.25, 0.5, 1.0)))
    monkeypatch.setattr(dpo, "train_dpo", _fake("dpo", calls))
    inputs = stage_inputs(algorithm, 1, proposer_algorithm="grpo")
    train.fn(*inputs, [])
    assert calls == expected
    assert solvers == ["incumbent", "closed"]  # rewarded against the incumbent, not the new solver
    metrics = {r["name"]: r["value"] for r in inputs[0].catalog.query(
        "SELECT name, value FROM metrics WHERE stage = 'train'")}
    assert metrics["proposer_reward_first_quarter"] == 0.0
    assert metrics["proposer_reward_last_quarter"] == 1.0
    assert metrics["proposer_grpo_rows"] == 1
