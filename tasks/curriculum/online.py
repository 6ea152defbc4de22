"""The proposer's online reward: sample the solver on each proposed problem, reward its pass rate.

Absolute Zero and R-Zero train the proposer by GRPO: every problem it writes during training is
handed to the current solver, which answers it k times; the pass rate p of those answers goes
through the proposer reward (learnability, uncertainty, band, ...: tasks.curriculum.rewards).
With `labels = "majority"` (R-Zero: no references), p is instead the share of the k answers
that agree with their majority vote (tasks.curriculum.votes). The answers are judged by the
domain's one verifier (`judge`, against the problem's row with its label), and p is over the
judged answers, as curate's pass rate is; a problem none of whose answers could be judged gets
None (TRL leaves it out of its group), as curate leaves it out. A sample the domain cannot
parse, or, with reference labels, whose reference it cannot compute, earns 0 — it teaches the
solver nothing. With a diversity penalty, R-Zero's repetition penalty is applied inside the
group batch: valid samples are clustered by near-duplicate similarity and each loses
`lambda x cluster size / batch size` (clipped at 0).

`solve(prompts, n, seed)` returns n answers per solver prompt; the train stage binds it to a
rollout backend on the incumbent checkpoint (the solver the proposer is rewarded against stays
fixed during the pass), tests bind it to a fake.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from domains.base import Domain, Problem, problem_row, with_label
from tasks.curriculum.dedup import clusters
from tasks.curriculum.rewards import diversity_penalties, proposer_weight
from tasks.curriculum.votes import majority_vote

if TYPE_CHECKING:
    from configs import CurateConfig

Solve = Callable[[list[str], int, int], list[list[str]]]
REWARD_NAME = "solver_pass_rate"


def online_proposer_reward(domain: Domain, solve: Solve, curation: CurateConfig, *, samples: int,
                           seed: int, labels: str = "reference"
                           ) -> Callable[..., list[float | None]]:
    """A TRL reward function over proposer completions (see the module docstring); `band` gives
    the reward and the diversity penalty, as it does for curate's proposer rows.

    Every call samples the solver with a new seed (`seed`, `seed + 1`, ...), so the same problem
    proposed in two steps is judged by fresh answers, and a rerun of the pass sees the same ones.
    """
    calls = 0

    def solver_pass_rate(completions: list[str], **_: Any) -> list[float | None]:
        nonlocal calls
        parsed = [domain.parse(text) for text in completions]
        valid = [i for i, p in enumerate(parsed)
                 if isinstance(p, Problem) and (labels == "majority" or p.reference is not None)]
        rewards: list[float | None] = [0.0] * len(completions)
        if valid:
            problems = [parsed[i] for i in valid]
            texts = [p.text for p in problems]
            diversity = curation.diversity
            penalties = (diversity_penalties(clusters(texts, threshold=diversity.threshold,
                                                      ngram=diversity.ngram))
                         if diversity.penalty > 0 else [0.0] * len(problems))
            answers = solve([domain.solver_prompt(text) for text in texts], samples, seed + calls)
            for index, problem, answered, penalty in zip(valid, problems, answers, penalties,
                                                         strict=True):
                answered = [domain.cut(a) for a in answered]  # as rollout cuts its samples
                label = (majority_vote([domain.extract(a) for a in answered]).label
                         if labels == "majority" else problem.reference)
                row = with_label(problem_row(problem), label)
                scores = [s for s in domain.score(answered, [row] * len(answered))
                          if s is not None]
                rewards[index] = (proposer_weight(sum(scores) / len(scores), scores, curation,
                                                  penalty=penalty) if scores else None)
        calls += 1
        return rewards

    solver_pass_rate.__name__ = REWARD_NAME
    return solver_pass_rate
