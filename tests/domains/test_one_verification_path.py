"""Every reward goes through `Domain.judge`: the same completions get equal rewards from verify,
the GRPO reward function, the proposer's online reward and evaluate, and equal again in a fresh
process that reads only the stored problems file.

Each case is a domain (arithmetic; a reasoning-gym mix with two metadata-reading tasks;
a question/answer file; python_io in every mode, plain and through the chat wrapper) with
problems from its generator and, per problem, completions that are right, wrong and unjudgeable.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from configs import CurateConfig, load_config
from domains import get_domain
from domains.base import Problem, problem_row
from domains.chat import ChatDomain
from domains.python_io import PythonIODomain
from models.grpo import verifier_reward
from models.rollout_types import Completion
from storage.datasets import read_table, write_atomic
from tasks.curriculum.online import online_proposer_reward
from tasks.curriculum.rewards import proposer_weight
from tasks.evaluate import eval_rows
from tasks.rows import problem_json
from tasks.synthesize import admit
from tasks.verify import verdict_frame

ROOT = Path(__file__).resolve().parents[2]
ALL_MODES = {"deduction": 1.0, "abduction": 1.0, "induction": 1.0}
RG_TASKS = {"countdown": 1.0, "n_queens": 1.0, "spell_backward": 1.0}


def _dataset_file(folder: Path) -> str:
    path = folder / "qa.jsonl"
    rows = [{"question": f"What is {i} times 3?", "answer": str(3 * i), "level": 1 + i % 2}
            for i in range(40)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _overrides(case: str, folder: Path) -> dict:
    if case == "arithmetic":
        return {}
    if case == "reasoning_gym":
        return {"domain.name": "reasoning_gym", "domain.min_level": 1, "domain.max_level": 2,
                "domain.reasoning_gym.tasks": RG_TASKS, "verify.extract": ["whole"]}
    if case == "dataset":
        return {"domain.name": "dataset", "domain.min_level": 1, "domain.max_level": 2,
                "domain.dataset.paths": [_dataset_file(folder)]}
    python_io = {"domain.name": "python_io", "domain.modes": ALL_MODES,
                 "sandbox.cpu_seconds": 0.5, "sandbox.wall_seconds": 1.0}
    if case == "python_io":
        return python_io
    return {**python_io, "prompt.stop": ["\n\n"]}  # python_io_chat: the ChatDomain wrapper


def _completions(domain, problem: Problem) -> list[str]:
    """A right answer, a wrong one, an empty one and one more per domain."""
    right = domain.training_target(problem.reference)
    extra = {"arithmetic": "no digits", "reasoning_gym": right + " and more",
             "dataset": f"the answer is \\boxed{{{right}}}",
             "python_io": "def f(x): return open('/etc/passwd')"}[domain.name]
    return [right, right + "0", "", extra]


class ReplayBackend:
    """A rollout backend that answers each prompt with the completion it was given."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def generate(self, prompts, params, progress=None):
        return [[Completion(text=self.answers[p], tokens=1)] for p in prompts]


@pytest.fixture(scope="module", params=["arithmetic", "reasoning_gym", "dataset", "python_io",
                                        "python_io_chat"])
def case(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    overrides = _overrides(request.param, folder)
    config = load_config(None, overrides)
    domain = get_domain(config.domain.name, config)
    assert isinstance(domain, ChatDomain) == (request.param == "python_io_chat")
    rng = random.Random(3)
    generated = [domain.generate(rng, level) for level in domain.levels[:2] for _ in range(3)]
    if domain.name == "reasoning_gym":  # every task of the mix, metadata readers included
        generated = [domain.generate_task(rng, task, 1) for task in RG_TASKS for _ in range(2)]
    _, problems = admit(domain, [("p", p.text) for p in generated], source="seed", seen=set(),
                        heldout=set(), run_id="r", round_index=0)
    assert len(problems) == len(generated) and all(p["reference"] for p in problems)
    path = write_atomic("problems", problems, folder / "problems.parquet").path
    yield request.param, overrides, config, domain, generated, path
    inner = domain.domain if isinstance(domain, ChatDomain) else domain
    if isinstance(inner, PythonIODomain):
        inner.pool.close()


def _by_path(case):
    """{path name: rewards of every (problem, completion) pair in order}."""
    name, _, config, domain, generated, path = case
    stored = read_table(path).to_pylist()
    completions = [_completions(domain, p) for p in generated]
    rollouts = [{"rollout_id": f"{row['problem_id']}-{k}", "run_id": "r", "round": 1,
                 "problem_id": row["problem_id"], "completion": c}
                for row, answers in zip(stored, completions, strict=True)
                for k, c in enumerate(answers)]
    flat = [c for answers in completions for c in answers]
    verify = verdict_frame(domain, rollouts, stored)["reward"].to_list()
    grpo = verifier_reward(domain)(
        completions=flat, problem=[problem_json(row) for row, answers in
                                   zip(stored, completions, strict=True) for _ in answers])
    evaluate = []
    for k in range(4):  # one evaluate pass per completion slot
        answers = {domain.solver_prompt(p.text): c[k] for p, c in zip(generated, completions,
                                                                       strict=True)}
        rows = eval_rows(ReplayBackend(answers), domain, per_level=0, max_new_tokens=4,
                         checkpoint="c", run_id="r", round_index=1, items=generated)
        evaluate.append([r["reward"] for r in rows])
    evaluate = [evaluate[k][i] for i in range(len(generated)) for k in range(4)]
    return {"verify": verify, "grpo": grpo, "evaluate": evaluate}, completions, stored


def test_verify_grpo_and_evaluate_give_the_same_rewards(case):
    rewards, _, _ = _by_path(case)
    assert rewards["verify"] == rewards["grpo"] == rewards["evaluate"]
    assert rewards["verify"][0::4] == [1.0] * (len(rewards["verify"]) // 4)  # right answers
    assert 0.0 in rewards["verify"]  # wrong answers are wrong, not unjudged


def test_the_online_proposer_reward_is_the_pass_rate_of_the_same_judgements(case):
    name, _, config, domain, generated, path = case
    rewards, completions, _ = _by_path(case)
    curation = CurateConfig(proposer_reward="variance")
    answers = {domain.solver_prompt(p.text): c for p, c in zip(generated, completions,
                                                               strict=True)}
    online = online_proposer_reward(domain, lambda prompts, n, seed: [answers[p] for p in prompts],
                                    curation, samples=4, seed=0)
    got = online(completions=[p.text for p in generated])
    for index, reward in enumerate(got):
        judged = [r for r in rewards["verify"][4 * index:4 * index + 4] if r is not None]
        assert reward == proposer_weight(sum(judged) / len(judged), judged, curation)


def test_a_fresh_process_reading_only_the_problems_file_judges_the_same(case):
    name, overrides, _, domain, _, path = case
    rewards, completions, _ = _by_path(case)
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from configs import load_config\nfrom domains import get_domain\n"
        "from storage.datasets import read_table\n"
        f"config = load_config(None, json.loads({json.dumps(json.dumps(overrides))}))\n"
        "domain = get_domain(config.domain.name, config)\n"
        f"rows = read_table({str(path)!r}).to_pylist()\n"
        f"completions = json.loads({json.dumps(json.dumps(completions))})\n"
        "flat = [c for answers in completions for c in answers]\n"
        "problems = [row for row, answers in zip(rows, completions) for _ in answers]\n"
        "print(json.dumps(domain.score(flat, problems)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == rewards["verify"]


def test_a_countdown_warmup_stores_every_reference_and_its_metadata(tmp_path):
    config = load_config(None, {"domain.name": "reasoning_gym",
                                "domain.reasoning_gym.tasks": {"countdown": 1.0},
                                "verify.extract": ["whole"]})
    domain = get_domain("reasoning_gym", config)
    rng = random.Random(0)
    pairs = [("p", domain.generate(rng, 1 + k % 3).text) for k in range(16)]
    _, problems = admit(domain, pairs, source="seed", seen=set(), heldout=set(), run_id="r",
                        round_index=0)
    assert len(problems) == 16
    assert all(p["reference"] is not None and p["task"] == "countdown" for p in problems)
    assert all("numbers" in json.loads(p["payload"])["metadata"] for p in problems)
    assert domain.score([p["reference"] for p in problems], problems) == [1.0] * 16
    assert problem_row(Problem("t", None, 1))["payload"] is None
