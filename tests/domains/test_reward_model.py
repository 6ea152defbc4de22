"""The reward model (domains/reward_model.py): a tiny random Qwen2ForSequenceClassification
(tests/models/chat_model.py) scores (solver prompt, answer) pairs; its rewards are the sigmoid
of its raw scores, kept in the verdicts' `score` column, exactly the same for a completion alone
or batched with others, and the same in verify and the GRPO reward. Plumbing only: a random
model cannot score meaningfully."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pytest

from configs import ConfigError, load_config
from domains import get_domain
from domains.base import DomainInputError
from domains.checking import Judgement
from domains.judge import JudgedDomain
from domains.reward_model import KEY, RewardModel, sigmoid
from models.rollout_types import Completion
from tasks.verify import verdict_frame
from tests.models.chat_model import build_reward_model

ROWS = [{"text": f"{a}+{a}", "reference": str(2 * a), "level": 1, "task": None, "payload": None}
        for a in range(1, 7)]
ANSWERS = ["2", "4", "the sum is 6, I am quite sure of it", "8", "x", "12 12 12 12 12 12 12"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_reward_model(tmp_path_factory.mktemp("rm") / "reward-model")


def reward_domain(path: str, **overrides: object) -> JudgedDomain:
    config = load_config(None, {"verify.compare": "reward_model",
                                "verify.reward_model.model_path": path, **overrides})
    domain = get_domain("arithmetic", config)
    assert isinstance(domain, JudgedDomain) and isinstance(domain.scorer, RewardModel)
    return domain


def test_rewards_are_the_sigmoid_of_the_raw_scores_kept_in_the_verdicts(folder: Path):
    domain = reward_domain(str(folder))
    judged = domain.judge(ANSWERS, ROWS)
    assert all(j.reason is None and 0.0 < j.reward < 1.0 for j in judged)
    assert [j.reward for j in judged] == [sigmoid(j.score) for j in judged]
    assert len({j.score for j in judged}) == len(ANSWERS)  # a random model, but not a constant
    rollouts = [{"rollout_id": f"r{i}", "run_id": "run", "round": 1, "problem_id": f"p{i}",
                 "completion": c} for i, c in enumerate(ANSWERS)]
    problems = [{"problem_id": f"p{i}", **row} for i, row in enumerate(ROWS)]
    verdicts = verdict_frame(domain, rollouts, problems)
    assert verdicts["score"].to_list() == pytest.approx([j.score for j in judged], abs=1e-6)
    assert verdicts["reward"].to_list() == pytest.approx([j.reward for j in judged], abs=1e-6)
    assert set(verdicts["verifier"]) == {domain.verifier()}
    plain = verdict_frame(get_domain("arithmetic"), rollouts, problems)
    assert plain["score"].null_count() == len(ANSWERS)  # every other verifier: null


def test_a_completion_gets_the_same_reward_alone_and_batched(folder: Path):
    """Exactly the same, not to a tolerance: a pass holds answers of one token length only, so
    no answer is padded, whatever it is batched with."""
    import random

    domain = reward_domain(str(folder), **{"verify.reward_model.batch_size": 4})
    same = [str(n) for n in range(10, 16)]  # six answers of one length: two passes of 4 and 2
    rows = [ROWS[0]] * len(same)
    batched = domain.judge(same + ANSWERS, rows + ROWS)
    assert domain.scorer.forward_passes < len(same + ANSWERS)  # the same lengths shared passes
    alone = [domain.judge([c], [row])[0] for c, row in zip(same + ANSWERS, rows + ROWS,
                                                          strict=True)]
    assert [j.score for j in alone] == [j.score for j in batched]
    assert [j.reward for j in alone] == [j.reward for j in batched]
    order = list(range(len(alone)))
    for seed in range(3):  # in another order and company, by a fresh process's model
        random.Random(seed).shuffle(order)
        kept = order[:4 + seed]
        again = reward_domain(str(folder), **{"verify.reward_model.batch_size": 4})
        shuffled = again.judge([(same + ANSWERS)[i] for i in kept],
                               [(rows + ROWS)[i] for i in kept])
        assert [j.score for j in shuffled] == [batched[i].score for i in kept]
    # the passes' shape is the verifier's: another batch_size is another verifier id
    assert again.verifier() != reward_domain(str(folder)).verifier()


def test_same_length_batches_group_by_length_in_order_of_first_appearance():
    from domains.reward_model import same_length_batches

    ids = [[1, 2], [3], [4, 5], [6, 7], [8], [9, 9]]
    assert same_length_batches(ids, 2) == [[0, 2], [3, 5], [1, 4]]
    assert same_length_batches([], 4) == []


def test_only_the_answer_after_the_thinking_is_scored(folder: Path):
    domain = reward_domain(str(folder))
    thought, plain, unfinished = domain.judge(
        ["<think>2 and 2 make 4</think>4", "4", "<think>2 and 2 make"], [ROWS[1]] * 3)
    assert thought == plain
    assert unfinished == Judgement(None, "thinking_unfinished")


def test_the_pair_is_rendered_with_the_reward_models_chat_template(folder: Path, tmp_path: Path):
    domain = reward_domain(str(folder))
    assert domain.scorer.text(domain.domain, "2+3", "5") == (
        "<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n")
    chat = reward_domain(str(folder), **{"prompt.system": "Be brief.",
                                         "prompt.instruction": "Answer with a number."})
    assert chat.scorer.text(chat.domain, "2+3", "5") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n2+3= Answer with a number.<|im_end|>\n"
        "<|im_start|>assistant\n5<|im_end|>\n")  # the solver's own messages
    raw = build_reward_model(tmp_path / "raw", pad_token=None)  # no template, no pad id
    (raw / "chat_template.jinja").unlink()
    bare = reward_domain(str(raw))
    assert bare.scorer.text(bare.domain, "2+3", "5") == bare.solver_prompt("2+3") + "5"
    batched = bare.judge(ANSWERS, ROWS)
    assert bare.scorer.model().config.pad_token_id == bare.scorer.tokenizer().pad_token_id
    alone = [bare.judge([c], [row])[0].score for c, row in zip(ANSWERS, ROWS, strict=True)]
    assert alone == pytest.approx([j.score for j in batched], abs=1e-6)


def test_the_tokenizer_pads_with_the_models_pad_token(tmp_path: Path):
    other = build_reward_model(tmp_path / "eos-pad", pad_token="<|im_end|>")
    domain = reward_domain(str(other))
    batched = domain.judge(ANSWERS, ROWS)
    assert domain.scorer.tokenizer().pad_token == "<|im_end|>"
    alone = [domain.judge([c], [row])[0].score for c, row in zip(ANSWERS, ROWS, strict=True)]
    assert alone == [j.score for j in batched]


def test_a_long_pair_keeps_the_end_of_its_answer(folder: Path):
    domain = reward_domain(str(folder), **{"verify.reward_model.max_length": 16})
    long_answer = "one two three " * 20 + "4"
    score = domain.judge([long_answer], [ROWS[1]])[0].score
    tokenizer = domain.scorer.tokenizer()
    text = domain.scorer.text(domain.domain, ROWS[1]["text"], long_answer)
    kept = tokenizer([text], truncation=True, max_length=16, add_special_tokens=False)
    assert len(kept["input_ids"][0]) == 16
    assert tokenizer.decode(kept["input_ids"][0]).endswith("4<|im_end|>\n")
    assert math.isfinite(score)


def test_the_verifier_id_names_the_model_and_its_settings(folder: Path):
    domain = reward_domain(str(folder))
    assert domain.verifier().startswith(f"reward_model[{folder}:")
    assert domain.verifier().endswith("]@2")
    assert reward_domain(str(folder)).verifier() == domain.verifier()
    longer = reward_domain(str(folder), **{"verify.reward_model.max_length": 512})
    assert longer.verifier() != domain.verifier()
    wider = reward_domain(str(folder), **{"verify.reward_model.batch_size": 4})
    assert wider.verifier() != domain.verifier()
    no_think = reward_domain(str(folder), **{"verify.think_tags": []})
    assert no_think.verifier() != domain.verifier()


def test_a_reward_model_without_a_model_or_folder_is_refused_before_the_run(tmp_path: Path):
    with pytest.raises(ConfigError, match="verify.reward_model.model_path"):
        load_config(None, {"verify.compare": "reward_model"})
    with pytest.raises(ConfigError, match="two verifiers"):
        load_config(None, {"verify.compare": "reward_model",
                           "verify.reward_model.model_path": str(tmp_path),
                           "verify.reward_function": "my_rewards:brevity"})
    with pytest.raises(DomainInputError, match=f"{KEY}.*no model folder"):
        reward_domain(str(tmp_path / "missing"))
    with pytest.raises(DomainInputError, match="labels; a reward model has one"):
        reward_domain(str(build_reward_model(tmp_path / "two", num_labels=2)))


def test_pickling_drops_the_loaded_model_and_scores_the_same(folder: Path):
    domain = reward_domain(str(folder))
    first = domain.judge(ANSWERS, ROWS)
    assert domain.scorer._model is not None
    copy = pickle.loads(pickle.dumps(domain))
    assert copy.scorer._model is None and copy.scorer._tokenizer is None
    assert copy.verifier() == domain.verifier()
    again = copy.judge(ANSWERS, ROWS)
    assert [j.score for j in again] == pytest.approx([j.score for j in first], abs=1e-6)


def test_a_hub_id_resolves_from_the_local_cache_offline(folder: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    from tests.models.hub_cache import cache_snapshot

    cache = tmp_path / "hub"
    cache_snapshot(cache, "tiny-org/tiny-reward", folder)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    domain = reward_domain("tiny-org/tiny-reward")
    assert domain.verifier().startswith("reward_model[tiny-org/tiny-reward:")
    by_id = domain.judge(ANSWERS[:3], ROWS[:3])
    by_folder = reward_domain(str(folder)).judge(ANSWERS[:3], ROWS[:3])
    assert [j.score for j in by_id] == pytest.approx([j.score for j in by_folder], abs=1e-6)
    with pytest.raises(DomainInputError, match=f"{KEY}: .*HF_HUB_OFFLINE=1"):
        reward_domain("tiny-org/not-cached")


class ReplayBackend:
    """A rollout backend that answers each prompt with the completion it was given."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def generate(self, prompts, params, progress=None):
        return [[Completion(text=self.answers[p], tokens=1)] for p in prompts]


def test_verify_the_grpo_reward_and_evaluate_get_the_same_rewards(folder: Path):
    from domains.base import Problem
    from models.grpo import verifier_reward
    from tasks.evaluate import eval_rows
    from tasks.rows import problem_json

    domain = reward_domain(str(folder))
    rollouts = [{"rollout_id": f"r{i}", "run_id": "run", "round": 1, "problem_id": f"p{i}",
                 "completion": c} for i, c in enumerate(ANSWERS)]
    problems = [{"problem_id": f"p{i}", **row} for i, row in enumerate(ROWS)]
    verify = verdict_frame(domain, rollouts, problems)["reward"].to_list()
    grpo = verifier_reward(domain)(completions=ANSWERS,
                                   problem=[problem_json(row) for row in problems])
    assert grpo == verify
    items = [Problem(row["text"], row["reference"], row["level"]) for row in ROWS]
    answers = {domain.solver_prompt(p.text): c for p, c in zip(items, ANSWERS, strict=True)}
    evaluate = [r["reward"] for r in eval_rows(
        ReplayBackend(answers), domain, per_level=0, max_new_tokens=4, checkpoint="c",
        run_id="run", round_index=1, items=items)]
    assert evaluate == verify
