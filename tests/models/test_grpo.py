"""GRPO with the domain verifier as reward: rewards reach the trainer and raise the mean reward.

The learning test warms a small tiny model up with SFT on level-1 generator problems (one-digit
sums and differences; afterwards fewer than half its samples at temperature 1 are right), then
runs GRPO twice from that checkpoint on the same 32 prompts for the same 300 steps: once
rewarded by the verifier, once by a coin flip that ignores correctness. Both runs record the
verifier's score of every generated completion. The verifier-rewarded run must raise the mean
score from the first third of its steps to the last by `MIN_GAIN`; the coin-flip run must not
(measured: +0.12 and -0.14), so the assertion fails if rewards do not reach the gradient.
About 30 s of CPU on one core (0.03 s per GRPO step).
"""

import json
import random
import statistics

import pytest

from domains.arithmetic import ArithmeticDomain
from domains.base import problem_row
from models.backends import SamplingParams, TransformersBackend
from models.grpo import REWARD_NAME, grpo_prompt_rows, train_grpo, verifier_reward
from models.tiny import build_tiny_model
from models.trainer import train_sft

domain = ArithmeticDomain()
MIN_GAIN = 0.05
GROUP, BATCH, STEPS = 8, 32, 300


def _rows(count, level, seed=0):
    rng, seen, rows = random.Random(seed), set(), []
    while len(rows) < count:
        problem = domain.generate(rng, level)
        if problem.text not in seen:
            seen.add(problem.text)
            rows.append({"prompt": domain.solver_prompt(problem.text),
                         "completion": problem.reference, "weight": 1.0,
                         "problem": json.dumps(problem_row(problem))})
    return rows


def _tiny(folder):
    return build_tiny_model(folder, hidden_size=64, num_layers=2, head_dim=32,
                            intermediate_size=128, init_seed=0)


@pytest.fixture(scope="module")
def warmed_up(tmp_path_factory):
    """The tiny model after a short SFT warm-up on level-1 references (about 8 s on one core)."""
    root = tmp_path_factory.mktemp("grpo")
    train_sft(base=_tiny(root / "init"), rows=_rows(150, 1, seed=1), out_dir=root / "sft",
              learning_rate=3e-3, batch_size=32, epochs=100, max_steps=300, max_length=24, seed=0,
              work_dir=root / "sft-trainer")
    return root / "sft"


def test_verifier_reward_judges_completions_against_problem_rows_and_unjudged_is_none():
    reward = verifier_reward(domain)
    assert reward.__name__ == REWARD_NAME
    rows = [json.dumps({"text": "1+1", "reference": r, "level": 1, "task": None,
                        "payload": None}) for r in ["2", "2", "2", None]]
    got = reward(prompts=["<solve>1+1="] * 4, completions=["2", "3", " 2x", "2"],
                 problem=rows, trainer_state=None)
    assert got == [1.0, 0.0, 1.0, None]


def test_grpo_refuses_prompt_rows_without_a_problem_to_judge(tmp_path):
    rows = [{k: v for k, v in row.items() if k != "problem"} for row in _rows(2, 1)]
    with pytest.raises(ValueError, match="no `problem` to judge against"):
        train_grpo(base=tmp_path, rows=rows, reward=verifier_reward(domain), out_dir=tmp_path,
                   learning_rate=1e-4, batch_size=8, epochs=1, max_steps=1, num_generations=4,
                   temperature=1.0, max_completion_length=4, beta=0.0, seed=0,
                   work_dir=tmp_path)


def test_the_proposer_pass_is_trained_without_problems(tmp_path, monkeypatch):
    # proposer rows of train_rows have no `problem`: their reward judges the proposals
    proposer = [{"prompt": domain.proposer_prompt(level), "completion": "", "weight": 1.0,
                 "problem": None} for level in (1, 2)]
    assert grpo_prompt_rows(proposer, batch_size=8, num_generations=4, judged=False) == proposer
    with pytest.raises(ValueError, match="no `problem` to judge against"):
        grpo_prompt_rows(proposer, batch_size=8, num_generations=4)
    from configs import load_config
    from models import backends
    from tasks import train as train_module

    seen = {}
    solver = type("Solver", (), {"close": lambda self: None})()
    monkeypatch.setattr(backends, "backend_for", lambda *_: solver)
    monkeypatch.setattr("models.grpo.train_grpo", lambda **kwargs: seen.update(kwargs))
    settings = train_module.train_settings(load_config(None, {
        "train.proposer.algorithm": "grpo", "train.replay_proposer_rows": True}), 1)
    train_module.train_proposer_grpo(domain, settings, base=tmp_path, rows=proposer,
                                     incumbent=tmp_path, seed=0)
    assert seen["judged"] is False and seen["rows"] == proposer


def test_grpo_writes_a_loadable_checkpoint_and_logs_rewards_per_step(tmp_path):
    seen = []
    score = verifier_reward(domain)

    def recorded(completions, problem, **kwargs):
        seen.append(list(completions))
        return score(completions=completions, problem=problem)

    # one prompt, two per step: TRL alone would train 0 steps and return (whole batches only)
    result = train_grpo(base=_tiny(tmp_path / "init"), rows=_rows(1, 1), reward=recorded,
                        out_dir=tmp_path / "out", learning_rate=3e-4, batch_size=8, epochs=4,
                        max_steps=2, num_generations=4, temperature=1.0, max_completion_length=4,
                        beta=0.0, seed=0, work_dir=tmp_path / "trainer")
    assert result.steps == 2 and len(result.rewards) == 2
    assert [len(batch) for batch in seen] == [8, 8]  # batch_size completions per step
    assert result.trained_tokens > 0
    backend = TransformersBackend(tmp_path / "out")
    outputs = backend.generate(["<solve>1+1="],
                               SamplingParams(n=2, temperature=1.0, max_new_tokens=4, seed=0))
    assert len(outputs[0]) == 2


def test_grpo_rejects_a_batch_that_splits_a_group(tmp_path):
    with pytest.raises(ValueError, match="multiple of num_generations"):
        train_grpo(base=tmp_path, rows=_rows(2, 1), reward=verifier_reward(domain),
                   out_dir=tmp_path, learning_rate=1e-4, batch_size=6, epochs=1, max_steps=1,
                   num_generations=4, temperature=1.0, max_completion_length=4, beta=0.0, seed=0,
                   work_dir=tmp_path)


def _run(base, out, rewarded_by_verifier):
    """GRPO from `base`; returns (verifier score per step, the trainer's logged rewards)."""
    score = verifier_reward(domain)
    coin = random.Random(1)
    per_step = []

    def reward(completions, problem, **kwargs):
        scores = score(completions=completions, problem=problem)
        per_step.append(statistics.mean(scores))
        return scores if rewarded_by_verifier else [float(coin.random() < 0.5) for _ in completions]

    result = train_grpo(base=base, rows=_rows(32, 1), reward=reward, out_dir=out / "model",
                        learning_rate=3e-4, batch_size=BATCH, epochs=100, max_steps=STEPS,
                        num_generations=GROUP, temperature=1.0, max_completion_length=4, beta=0.0,
                        seed=0, work_dir=out / "trainer")
    return per_step, list(result.rewards)


def _gain(per_step):
    third = len(per_step) // 3
    return statistics.mean(per_step[-third:]) - statistics.mean(per_step[:third])


@pytest.mark.slow
def test_grpo_raises_mean_reward_after_sft_warmup_only_when_rewarded_by_the_verifier(
        warmed_up, tmp_path):
    verified, logged = _run(warmed_up, tmp_path / "verifier", rewarded_by_verifier=True)
    assert len(verified) == len(logged) == STEPS
    # the trainer's logged reward of each step is the verifier's mean over that step's completions
    assert logged == pytest.approx(verified, abs=1e-6)
    assert _gain(logged) >= MIN_GAIN, f"gain {_gain(logged):+.3f} over {STEPS} steps"

    coin_flip, _ = _run(warmed_up, tmp_path / "coin", rewarded_by_verifier=False)
    assert len(coin_flip) == STEPS
    assert _gain(coin_flip) < MIN_GAIN, (
        f"gain {_gain(coin_flip):+.3f} without the verifier's signal")


def test_grpo_killed_mid_training_resumes_to_the_same_weights(tmp_path):
    from safetensors.torch import load_file

    from models.trainer import last_checkpoint

    class Killed(Exception):
        pass

    def kill_at_step_4(step, total, loss):
        if step == 4:
            raise Killed

    base = _tiny(tmp_path / "init")

    def run(name, **kwargs):
        return train_grpo(base=base, rows=_rows(8, 1), reward=verifier_reward(domain),
                          out_dir=tmp_path / name / "out", learning_rate=1e-3, batch_size=8,
                          epochs=10, max_steps=6, num_generations=4, temperature=1.0,
                          max_completion_length=4, beta=0.0, seed=0,
                          work_dir=tmp_path / name / "trainer", save_steps=3, **kwargs)

    whole = run("whole")
    with pytest.raises(Killed):
        run("killed", progress=kill_at_step_4)
    checkpoint, _ = last_checkpoint(tmp_path / "killed" / "trainer")
    assert checkpoint.name == "checkpoint-3"
    resumed = run("killed", resume_from=checkpoint)
    assert resumed.steps == whole.steps == 6 and resumed.rewards == whole.rewards
    a, b = (load_file(tmp_path / name / "out" / "model.safetensors")
            for name in ("whole", "killed"))
    assert all(a[key].equal(b[key]) for key in a)
