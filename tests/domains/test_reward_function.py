"""The user's TRL-style reward function (domains/reward_function.py): called with exactly TRL's
keywords (completions, prompts and the problem row's columns), its None is unjudged with a
reason, its bad returns and bad imports are one-line errors naming the key, and it is the
verifier of verify, the GRPO reward and evaluate alike (all through `Domain.judge`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from configs import ConfigError, load_config
from domains import get_domain
from domains.base import DomainInputError
from domains.checking import Judgement
from domains.judge import JudgedDomain

REWARDS = '''
CALLS = []

def graded(completions, prompts, text, reference, level, task, payload, **kwargs):
    CALLS.append({"completions": completions, "prompts": prompts, "text": text,
                  "reference": reference, "level": level, "task": task, "payload": payload,
                  "extra": sorted(kwargs)})
    out = []
    for completion, ref in zip(completions, reference):
        if completion == "?":
            out.append(None)
        elif completion == "nan":
            out.append(float("nan"))
        else:
            out.append(1.0 if completion == ref else 0.25)
    return out

def short(completions, **kwargs):
    return [1.0]

def too_big(completions, **kwargs):
    return [2.0 for _ in completions]

def words(completions, **kwargs):
    return ["good" for _ in completions]
'''

ROWS = [{"text": "2+3", "reference": "5", "level": 1, "task": None, "payload": None},
        {"text": "1+1", "reference": "2", "level": 2, "task": "t", "payload": '{"a":1}'}]


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of reward functions in the working directory (a fresh name per test)."""
    name = f"user_rewards_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(REWARDS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield name
    sys.modules.pop(name, None)


def domain_with(spec: str):
    return get_domain("arithmetic", load_config(None, {"verify.reward_function": spec}))


def test_it_is_called_with_trls_keywords_and_its_none_is_unjudged(user_module: str):
    domain = domain_with(f"{user_module}:graded")
    assert isinstance(domain, JudgedDomain)
    judged = domain.judge(["5", "3", "?", "nan"], [ROWS[0], ROWS[1], ROWS[0], ROWS[1]])
    assert judged == [Judgement(1.0), Judgement(0.25), Judgement(None, "reward_none"),
                      Judgement(None, "reward_none")]
    (call,) = sys.modules[user_module].CALLS
    plain = get_domain("arithmetic")
    assert call == {"completions": ["5", "3", "?", "nan"],
                    "prompts": [plain.solver_prompt(t) for t in ("2+3", "1+1", "2+3", "1+1")],
                    "text": ["2+3", "1+1", "2+3", "1+1"], "reference": ["5", "2", "5", "2"],
                    "level": [1, 2, 1, 2], "task": [None, "t", None, "t"],
                    "payload": [None, '{"a":1}', None, '{"a":1}'], "extra": []}
    assert domain.verifier().startswith(f"reward_function[{user_module}:graded#")


@pytest.mark.parametrize(("function", "match"), [
    ("short", r"returned 1 values for 2 completions"),
    ("too_big", r"returned 2.0 for completion 0: rewards must be in \[0, 1\]"),
    ("words", r"returned 'good' for completion 0"),
])
def test_a_bad_return_is_an_error_naming_the_key(user_module: str, function: str, match: str):
    domain = domain_with(f"{user_module}:{function}")
    with pytest.raises(ValueError, match=f"verify.reward_function = .*{match}"):
        domain.judge(["5", "2"], ROWS)


@pytest.mark.parametrize(("spec", "match"), [
    ("no_colon", "write it as 'module:function'"),
    ("no_such_module_xyz:f", "importing 'no_such_module_xyz' failed .*ModuleNotFoundError"),
])
def test_a_bad_spec_is_refused_before_the_run(spec: str, match: str):
    with pytest.raises(DomainInputError, match=f"verify.reward_function = '{spec}': {match}"):
        domain_with(spec)


def test_a_missing_function_is_refused_before_the_run(user_module: str):
    with pytest.raises(DomainInputError, match="has no function 'absent'"):
        domain_with(f"{user_module}:absent")


def test_a_module_that_raises_on_import_is_one_line(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "broken_rewards_q.py").write_text("raise RuntimeError('no GPU\\nhere')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(DomainInputError) as info:
        domain_with("broken_rewards_q:f")
    assert "\n" not in str(info.value) and "RuntimeError: no GPU" in str(info.value)


def test_a_judge_and_a_reward_function_together_are_a_config_error():
    with pytest.raises(ConfigError, match="two verifiers"):
        load_config(None, {"verify.compare": "judge", "verify.reward_function": "m:f"})


def test_the_grpo_reward_and_verify_use_it(user_module: str):
    from models.grpo import verifier_reward
    from tasks.verify import verdict_frame

    domain = domain_with(f"{user_module}:graded")
    reward = verifier_reward(domain)
    problems = [json.dumps(ROWS[0]), json.dumps(ROWS[1]), json.dumps(ROWS[0])]
    assert reward(completions=["5", "1", "?"], problem=problems) == [1.0, 0.25, None]
    rollouts = [{"rollout_id": f"r{i}", "run_id": "run", "round": 1, "problem_id": "p",
                 "completion": c} for i, c in enumerate(["5", "?"])]
    verdicts = verdict_frame(domain, rollouts, [{"problem_id": "p", **ROWS[0]}])
    assert verdicts["reward"].to_list() == [1.0, None]
    assert verdicts["method"].to_list() == ["reference", "reward_none"]


def test_evaluate_judges_the_held_out_answers_with_it(user_module: str):
    from models.rollout_types import Completion
    from tasks.evaluate import eval_rows

    class Answers:  # a backend answering every held-out item "5"
        def generate(self, prompts, params, progress=None):
            return [[Completion(text="5", tokens=1)] for _ in prompts]

    domain = domain_with(f"{user_module}:graded")
    rows = eval_rows(Answers(), domain, per_level=2, max_new_tokens=4, checkpoint="c",
                     run_id="run", round_index=1)
    items = domain.heldout(2)
    assert [r["reward"] for r in rows] == [1.0 if p.reference == "5" else 0.25 for p in items]
    assert sys.modules[user_module].CALLS[0]["text"] == [p.text for p in items]


@pytest.mark.parametrize(("correct_threshold", "correct"),
                         [(1.0, (True, False)), (0.25, (True, True)), (0.3, (True, False))])
def test_evaluate_counts_a_graded_reward_correct_from_its_threshold(user_module: str,
                                                                   correct_threshold: float,
                                                                   correct: tuple[bool, bool]):
    """[evaluate] correct_threshold: a graded reward (here 1.0 for the reference, 0.25 otherwise) is
    correct at or above the bar; an unjudged answer never is."""
    from models.rollout_types import Completion
    from tasks.evaluate import accuracy, eval_rows

    class Answers:  # "5" to every held-out item, and "?" (unjudged: reward None) besides
        def generate(self, prompts, params, progress=None):
            return [[Completion(text="5", tokens=1), Completion(text="?", tokens=1)]
                    for _ in prompts]

    domain = domain_with(f"{user_module}:graded")
    rows = eval_rows(Answers(), domain, per_level=2, max_new_tokens=4, checkpoint="c",
                     run_id="run", round_index=1, samples=2, temperature=0.5,
                     correct_threshold=correct_threshold)
    items = domain.heldout(2)
    answered = [r for r in rows if r["completion"] == "5"]
    assert [r["correct"] for r in answered] == [correct[0] if p.reference == "5" else correct[1]
                                                for p in items]
    assert not any(r["correct"] for r in rows if r["completion"] == "?")
    assert accuracy(rows)["accuracy"] == sum(r["correct"] for r in answered) / len(rows)


def test_correct_threshold_is_a_share_of_the_reward_range():
    assert load_config(None).evaluate.correct_threshold == 1.0
    config = load_config(None, {"evaluate.correct_threshold": 0.75})
    assert config.evaluate.correct_threshold == 0.75
    for bad in (0, 1.5):
        with pytest.raises(ConfigError, match="correct_threshold"):
            load_config(None, {"evaluate.correct_threshold": bad})
