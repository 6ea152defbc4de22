"""The LLM judge (domains/judge.py): a scripted backend fixes the judge's replies, so parsing,
the template, batching and the verdicts' reasons are checked exactly; the tiny random chat
model of tests/models judges a handful of rollouts through the real transformers backend (the
plumbing only: a random model cannot judge meaningfully)."""

from __future__ import annotations

from pathlib import Path

import pytest

from configs import ConfigError, load_config
from domains import get_domain
from domains.base import DomainInputError
from domains.checking import UNJUDGED_REASONS, VERIFIER_FAILURES, Judgement
from domains.judge import SCALE_TEMPLATES, JudgedDomain, ModelJudge, parse_score
from models.rollout_types import Completion, SamplingParams
from tasks.verify import verdict_frame


class ScriptedBackend:
    """A judge backend whose reply to a prompt is `replies[i]` for the i-th distinct prompt
    ever asked; it records every call."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def generate(self, prompts: list[str], params: SamplingParams,
                 progress=None) -> list[list[Completion]]:
        self.calls.append((list(prompts), params))
        return [[Completion(text=self.replies.pop(0), tokens=1)] for _ in prompts]

    def close(self) -> None:
        pass


def scripted_judge(replies: list[str], **judge: object) -> tuple[ModelJudge, ScriptedBackend]:
    config = load_config(None, {"verify.compare": "judge",
                                **{f"verify.judge.{k}": v for k, v in judge.items()}})
    backend = ScriptedBackend(replies)
    return ModelJudge(config.verify.judge, model_path="scripted", backend=backend), backend


ROWS = [{"text": f"{a}+{a}", "reference": str(2 * a), "level": 1, "task": None, "payload": None}
        for a in range(1, 7)]


@pytest.mark.parametrize(("reply", "scale", "reward"), [
    (" 7", "1-10", 6 / 9),
    ("1", "1-10", 0.0),
    ("10", "1-10", 1.0),
    ("Score: 10/10", "1-10", 1.0),
    ("I would say the score is 4.", "1-10", 3 / 9),
    ("7.5 out of 10", "1-10", 6.5 / 9),
    ("0", "1-10", None),            # off the scale
    ("11", "1-10", None),
    ("great answer!", "1-10", None),
    ("", "1-10", None),
    ("PASS", "pass_fail", 1.0),
    (" fail: 2+2 is not 5", "pass_fail", 0.0),
    ("Pass. It is correct", "pass_fail", 1.0),
    ("passable", "pass_fail", None),   # whole words only
    ("9", "pass_fail", None),
])
def test_replies_are_parsed_on_their_scale(reply, scale, reward):
    parsed = parse_score(reply, scale)
    if reward is None:
        assert parsed is None
    else:
        assert parsed == pytest.approx(reward)


def test_an_unparseable_reply_is_unjudged_with_its_reason_never_0():
    judge, _ = scripted_judge(["8", "nonsense", "1"])
    domain = get_domain("arithmetic")
    judged = judge.judge(["2", "4", "6"], ROWS[:3], domain)
    assert judged == [Judgement(7 / 9), Judgement(None, "judge_unparseable"), Judgement(0.0)]
    assert "judge_unparseable" in UNJUDGED_REASONS
    assert "judge_unparseable" in VERIFIER_FAILURES  # the gate's verifier-failure share


def test_the_template_holds_question_answer_and_rubric():
    judge, backend = scripted_judge(["5"], rubric="Exact sums only.")
    judge.judge(["4"], [ROWS[1]], get_domain("arithmetic"))
    (prompts, params), = backend.calls
    question = get_domain("arithmetic").question("2+2")
    assert prompts == [SCALE_TEMPLATES["1-10"].format(
        question=question, answer="4", rubric="\n\nRubric: Exact sums only.")]
    assert params.greedy and params.n == 1 and params.max_new_tokens == 16

    own, backend = scripted_judge(["PASS"], scale="pass_fail", rubric="R",
                                  template="Q={question} A={answer} [{rubric}]")
    assert own.judge(["4"], [ROWS[1]], get_domain("arithmetic")) == [Judgement(1.0)]
    assert backend.calls[0][0] == [f"Q={question} A=4 [R]"]


def test_a_bad_template_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="template"):
        load_config(None, {"verify.judge.template": "Rate {answer} for {user}"})
    with pytest.raises(ConfigError, match="answer"):
        load_config(None, {"verify.judge.template": "Rate {question}"})


def test_a_batch_is_one_backend_call_and_a_prompt_is_judged_once():
    judge, backend = scripted_judge([str(s) for s in range(1, 7)])
    domain = get_domain("arithmetic")
    completions = [str(2 * a) for a in range(1, 7)]
    first = judge.judge(completions, ROWS, domain)
    assert len(backend.calls) == 1 and len(backend.calls[0][0]) == 6
    assert [j.reward for j in first] == pytest.approx([s / 9 for s in range(6)])
    assert judge.judge(completions, ROWS, domain) == first  # the same completion, the same reward
    assert len(backend.calls) == 1
    # the same (question, answer) twice in one batch is asked once
    backend.replies.append("3")
    judge.judge(["9", "9"], [ROWS[0], ROWS[0]], domain)
    assert len(backend.calls) == 2 and len(backend.calls[1][0]) == 1


def test_verify_records_the_judges_rewards_reasons_and_id(tmp_path: Path):
    judge, backend = scripted_judge(["10", "what?", "3"])
    domain = JudgedDomain(get_domain("arithmetic"), judge)
    rollouts = [{"rollout_id": f"r{i}", "run_id": "run", "round": 1, "problem_id": "p0",
                 "completion": c} for i, c in enumerate(["2", "3", "4"])]
    problems = [{"problem_id": "p0", **ROWS[0]}]
    verdicts = verdict_frame(domain, rollouts, problems)
    assert verdicts["reward"].to_list() == [1.0, None, pytest.approx(2 / 9)]
    assert verdicts["method"].to_list() == ["reference", "judge_unparseable", "reference"]
    assert set(verdicts["verifier"]) == {judge.describe()}
    assert judge.describe().startswith("judge[scripted:1-10:")
    assert len(backend.calls) == 1


def test_get_domain_puts_the_judge_in_the_one_judging_path(tmp_path: Path):
    folder = tmp_path / "judge-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    config = load_config(None, {"verify.compare": "judge",
                                "verify.judge.model_path": str(folder)})
    domain = get_domain("arithmetic", config)
    assert isinstance(domain, JudgedDomain)
    assert domain.verifier().startswith(f"judge[{folder}:1-10:")
    assert domain.solver_prompt("2+3") == get_domain("arithmetic").solver_prompt("2+3")
    other = load_config(None, {"verify.compare": "judge", "verify.judge.model_path": str(folder),
                               "verify.judge.rubric": "x"})
    assert get_domain("arithmetic", other).verifier() != domain.verifier()
    assert not isinstance(get_domain("arithmetic", load_config(None)), JudgedDomain)


def test_a_judge_without_a_model_is_refused_before_the_run():
    with pytest.raises(DomainInputError, match="verify.judge.model_path"):
        get_domain("arithmetic", load_config(None, {"verify.compare": "judge"}))
    with pytest.raises(DomainInputError, match="no model folder"):
        get_domain("arithmetic", load_config(None, {"verify.compare": "judge",
                                                     "verify.judge.model_path": "/nonexistent"}))


def test_the_tiny_chat_model_judges_through_the_real_backend(tmp_path: Path):
    """Plumbing only: the random model's replies are mostly no score (judge_unparseable)."""
    from tests.models.chat_model import build_chat_model

    folder = build_chat_model(tmp_path / "judge")
    config = load_config(None, {"verify.compare": "judge", "verify.judge.model_path": str(folder),
                                "verify.judge.max_new_tokens": 4})
    domain = get_domain("arithmetic", config)
    completions = ["2", "4", "5", "8", "11"]
    rows = [{**ROWS[i]} for i in range(5)]
    first = domain.judge(completions, rows)
    scorer = domain.scorer
    assert scorer.cost.calls == 1
    assert scorer.render("Score?") == "<|im_start|>user\nScore?<|im_end|>\n<|im_start|>assistant\n"
    assert all((j.reward is None and j.reason == "judge_unparseable")
               or (j.reason is None and 0.0 <= j.reward <= 1.0) for j in first)
    again = get_domain("arithmetic", config)  # a fresh process's judge: the same rewards
    assert again.judge(completions, rows) == first
