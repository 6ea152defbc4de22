"""The GRPO reward's judgement journal (models/grpo_journal.py): under an LLM judge every reward
call stores its judgements, and a resumed pass asks the judge nothing it journaled."""

from __future__ import annotations

import json

from configs import load_config
from domains import get_domain
from domains.judge_rows import model_judge_of
from tests.tasks.scripted_judge import (
    ArithmeticJudge,
    judged_config,
)


def test_the_grpo_reward_journals_each_calls_judgements(tmp_path, judge_folder):
    """Judge calls while training are data too: every GRPO reward call under an LLM judge writes
    its judgements (models/grpo_journal.py), one part per step and call, whose rewards are the
    ones the trainer got; the train stage reads them with the run and round filled in."""
    from models.grpo import verifier_reward
    from models.grpo_journal import read_journal

    domain = get_domain("arithmetic", judged_config(judge_folder))
    reward = verifier_reward(domain, journal=tmp_path / "journal")
    problems = [json.dumps({"text": t, "reference": str(eval(t)), "level": 1,  # noqa: S307
                            "task": None, "payload": None}) for t in ("2+3", "2+3", "4*4")]

    class State:
        global_step = 3

    first = reward(completions=["5", "6", "16"], problem=problems, problem_id=["a", "a", "b"],
                   trainer_state=State())
    again = reward(completions=["5", "x"], problem=problems[:2], problem_id=["a", "a"],
                   trainer_state=State())
    assert first == [1.0, 0.0, 1.0] and again[0] == 1.0
    assert sorted(p.name for p in (tmp_path / "journal").iterdir()) == [
        "step-0000003-rank-000-call-000.parquet", "step-0000003-rank-000-call-001.parquet"]
    stored = read_journal([tmp_path / "journal", tmp_path / "absent"], "r", 2)
    assert stored["rollout_id"].to_list() == ["grpo/3/0/0/0", "grpo/3/0/0/1", "grpo/3/0/0/2",
                                              "grpo/3/0/1/0", "grpo/3/0/1/1"]
    assert stored["reward"].to_list()[:4] == [*first, again[0]]
    assert set(stored["run_id"]) == {"r"} and set(stored["round"]) == {2}
    assert stored["problem_id"].to_list() == ["a", "a", "b", "a", "a"]
    assert set(stored["judge"]) == {model_judge_of(domain).describe()}
    assert ArithmeticJudge.CALLS == [3, 1]  # "2+3 -> 5" was asked once
    assert read_journal([tmp_path / "absent"], "r", 2) is None


def test_a_reward_without_an_llm_judge_journals_nothing(tmp_path):
    from models.grpo import verifier_reward

    reward = verifier_reward(get_domain("arithmetic", load_config(None)),
                             journal=tmp_path / "journal")
    problem = json.dumps({"text": "1+1", "reference": "2", "level": 1, "task": None,
                          "payload": None})
    assert reward(completions=["2"], problem=[problem], problem_id=["p"]) == [1.0]
    assert not (tmp_path / "journal").exists()


def test_a_resumed_grpo_pass_asks_the_judge_nothing_it_journaled(tmp_path, judge_folder):
    from models.grpo import verifier_reward

    problem = json.dumps({"text": "2+3", "reference": "5", "level": 1, "task": None,
                          "payload": None})
    asked = {"completions": ["5", "6"], "problem": [problem] * 2, "problem_id": ["a"] * 2}
    first = verifier_reward(get_domain("arithmetic", judged_config(judge_folder)),
                            journal=tmp_path / "journal")(**asked)
    assert ArithmeticJudge.CALLS == [2]
    again = verifier_reward(get_domain("arithmetic", judged_config(judge_folder)),
                            journal=tmp_path / "journal")(**asked)  # a new process's judge
    assert again == first and ArithmeticJudge.CALLS == [2]
