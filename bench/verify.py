"""How fast are answers checked? Answers per second for each verify method, on --answers answers.

The answers are synthetic solver completions in the forms real models write (`\\boxed{}`,
`#### x`, "the answer is x", a bare number, fractions and decimals), right and wrong, against
references; `--distinct` of them are different (answer, reference) pairs and the rest repeat
them, as the k samples of one problem often agree. Methods, each through
`domains.checking.AnswerChecker` (extraction included):

    exact       normalised text equality
    task        reasoning-gym's scorer of basic_arithmetic (the reasoning_gym domain's default)
    math_cold   math-verify on the distinct pairs, cache cleared first (the per-call cost)
    math        math-verify on all answers, cache cleared first: repeats are cache hits

Printed: answers, seconds and answers per second per method, and the math cache's hits.

    python bench/verify.py [--answers 100000] [--distinct 5000] [--out bench/results/verify.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FORMS = ("so the answer is {}.", "We get \\boxed{{{}}}", "step 1 ... step 2\n#### {}", "{}")


def _pair(rng: random.Random) -> tuple[str, str]:
    value = Fraction(rng.randint(-999, 999), rng.choice([1, 1, 1, 2, 4, 5]))
    reference = str(value.numerator) if value.denominator == 1 else str(float(value))
    shown = value if rng.random() < 0.6 else value + rng.randint(1, 9)  # 60 % right
    written = (f"\\frac{{{shown.numerator}}}{{{shown.denominator}}}"
               if shown.denominator != 1 and rng.random() < 0.5 else
               str(shown.numerator) if shown.denominator == 1 else str(float(shown)))
    return rng.choice(FORMS).format(written), reference


def answers(count: int, distinct: int, seed: int = 0) -> list[tuple[str, str]]:
    """`count` (completion, reference) pairs, `distinct` different ones, repeats shuffled in."""
    rng = random.Random(seed)
    unique = [_pair(rng) for _ in range(distinct)]
    pairs = unique + [rng.choice(unique) for _ in range(count - distinct)]
    rng.shuffle(pairs)
    return pairs


def time_method(checker, pairs, task_score=None) -> dict[str, float]:
    start = time.perf_counter()
    rewards = [checker.judge(c, r, task_score).reward for c, r in pairs]
    seconds = time.perf_counter() - start
    judged = [x for x in rewards if x is not None]
    return {"answers": len(pairs), "seconds": round(seconds, 3),
            "answers_per_s": round(len(pairs) / seconds, 1),
            "mean_reward": round(sum(judged) / max(1, len(judged)), 4),
            "unjudged": len(pairs) - len(judged)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--answers", type=int, default=100_000)
    parser.add_argument("--distinct", type=int, default=5_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "verify.json")
    args = parser.parse_args()
    from domains.checking import AnswerChecker
    from domains.equivalence import math_equal

    pairs = answers(args.answers, args.distinct)
    unique = list(dict.fromkeys(pairs))
    extract = ("boxed", "hashes", "answer_is", "last_number")
    report: dict[str, object] = {"answers": len(pairs), "distinct": len(unique),
                                 "python": platform.python_version(), "methods": {}}
    methods = report["methods"]
    methods["exact"] = time_method(AnswerChecker(extract=extract, compare="exact"), pairs)

    from reasoning_gym.factory import create_dataset

    scorer = create_dataset("basic_arithmetic", size=1, seed=0).score_answer
    methods["task"] = time_method(AnswerChecker(extract=extract, compare="task"), pairs,
                                  lambda a, r: scorer(a, {"answer": r, "metadata": {}}))
    math = AnswerChecker(extract=extract, compare="math")
    math_equal.cache_clear()
    methods["math_cold"] = time_method(math, unique)
    math_equal.cache_clear()
    methods["math"] = time_method(math, pairs)
    info = math_equal.cache_info()
    report["math_cache"] = {"hits": info.hits, "misses": info.misses}
    for name, row in methods.items():
        print(f"{name:<10} {row['answers']:>7} answers  {row['seconds']:>8.2f} s  "
              f"{row['answers_per_s']:>10.1f} answers/s  mean reward {row['mean_reward']:.3f}  "
              f"unjudged {row['unjudged']}")
    print(f"math cache: {info.hits} hits, {info.misses} misses")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
