"""How fast does an LLM judge judge? Judgements per second beside the raw backend's generations
per second on the same prompts, and the stored judgements' hit rate on a resume.

`--answers` solver answers to `--problems` arithmetic problems (right and wrong, `--distinct`
different answers per problem, so k samples that agree make one prompt) are judged three ways,
each on a backend of its own loaded from the same folder and warmed up on one prompt, `--repeats`
times (raw before judge, then judge before raw, ...; then resume; the medians are printed):

    raw      the backend's `generate` on the judge's distinct prompts (rendered, greedy, the
             judge's max_new_tokens): the model's own rate
    judge    `ModelJudge.judge` on every answer (prompts built, deduplicated, sent in one call,
             replies parsed): answers and prompts per second
    resume   a fresh judge given the stored replies (tasks/judgements.py `remember`), then
             judging every answer again: backend calls, hit rate, answers per second

Printed: per way seconds and rates, and the ratio judge prompts/s over raw generations/s (the
judge's overhead on the model; 1.0 = none). The default judge is the tiny random chat model of
tests/models (its replies are mostly no score: a speed figure only); `--model` names a real one:

    python bench/judge.py [--model FOLDER] [--backend transformers|vllm] [--problems 64]
                          [--answers 512] [--distinct 4] [--max-new-tokens 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def answers(problems: int, count: int, distinct: int, seed: int = 0) -> tuple[list[str], list]:
    """(completions, problem rows): `count` answers spread over `problems` arithmetic problems,
    each problem's drawn from `distinct` candidates (the first right)."""
    from domains.arithmetic import ArithmeticDomain
    from domains.base import problem_row

    rng = random.Random(seed)
    domain = ArithmeticDomain()
    rows = [problem_row(domain.generate(rng, 1 + i % 3)) for i in range(problems)]
    candidates = [[row["reference"], *(str(int(row["reference"]) + d)
                                       for d in range(1, distinct))] for row in rows]
    picked = [rng.randrange(problems) for _ in range(count)]
    return [rng.choice(candidates[i]) for i in picked], [rows[i] for i in picked]


def judge_of(args: argparse.Namespace, folder: str):
    from configs import load_config
    from domains.judge import ModelJudge

    settings = load_config(None, {"verify.compare": "judge", "verify.judge.model_path": folder,
                                  "verify.judge.max_new_tokens": args.max_new_tokens}).verify.judge
    return ModelJudge(settings, model_path=folder, backend_name=args.backend,
                      batch_size=args.batch_size)


def one_pass(args: argparse.Namespace, folder: str, completions: list[str], problems: list,
             domain, *, judge_first: bool) -> dict[str, dict[str, float]]:
    """raw and judge (in the order `judge_first` says, each on a backend loaded and warmed up
    on one prompt first), then resume."""
    from models.rollout_types import SamplingParams

    judge = judge_of(args, folder)
    prompts = [p for p in dict.fromkeys(judge.prompts(completions, problems, domain))
               if p is not None]
    rendered = [judge.render(p) for p in prompts]  # loads the judge's backend
    raw = judge_of(args, folder).backend()
    params = SamplingParams(n=1, temperature=1.0, greedy=True, seed=0,
                            max_new_tokens=args.max_new_tokens)
    for backend in (raw, judge.backend()):  # one warm-up call each, not timed
        backend.generate(rendered[:1], params)

    def time_raw() -> tuple[float, list]:
        start = time.perf_counter()
        generated = raw.generate(rendered, params)
        return time.perf_counter() - start, generated

    def time_judge() -> float:
        start = time.perf_counter()
        judge.judge(completions, problems, domain)
        return time.perf_counter() - start

    if judge_first:
        judge_seconds = time_judge()
        raw_seconds, generated = time_raw()
    else:
        raw_seconds, generated = time_raw()
        judge_seconds = time_judge()
    raw.close()
    fresh = judge_of(args, folder)
    fresh.remember(prompts, [judge.reply(p) for p in prompts])
    start = time.perf_counter()
    fresh.judge(completions, problems, domain)
    resume_seconds = time.perf_counter() - start
    judge.backend().close()
    tokens = sum(samples[0].tokens for samples in generated)
    return {
        "raw": {"seconds": raw_seconds, "generations_per_s": len(prompts) / raw_seconds,
                "tokens_per_s": tokens / raw_seconds},
        "judge": {"seconds": judge_seconds, "answers_per_s": len(completions) / judge_seconds,
                  "prompts_per_s": judge.cost.prompts / judge_seconds,
                  "calls": judge.cost.calls, "prompts": judge.cost.prompts},
        "resume": {"seconds": resume_seconds,
                   "answers_per_s": len(completions) / max(resume_seconds, 1e-9),
                   "calls": fresh.cost.calls, "hit_rate": fresh.cost.reused / len(prompts)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="the judge's folder; default: the tiny chat model")
    parser.add_argument("--backend", default="transformers", choices=["transformers", "vllm"])
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--answers", type=int, default=512)
    parser.add_argument("--distinct", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "judge.json")
    args = parser.parse_args()
    from domains.arithmetic import ArithmeticDomain

    completions, problems = answers(args.problems, args.answers, args.distinct)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.model
        if folder is None:
            from tests.models.chat_model import build_chat_model

            folder = str(build_chat_model(Path(scratch) / "judge"))
        runs = [one_pass(args, folder, completions, problems, ArithmeticDomain(),
                         judge_first=index % 2 == 1) for index in range(args.repeats)]
    median = {way: {key: statistics.median(run[way][key] for run in runs) for key in runs[0][way]}
              for way in runs[0]}
    report = {"model": args.model or "tiny chat model (tests/models)", "backend": args.backend,
              "answers": len(completions), "python": platform.python_version(),
              "repeats": args.repeats, "median": median, "runs": runs}
    raw, judged, resumed = median["raw"], median["judge"], median["resume"]
    print(f"answers {len(completions)}, distinct prompts {judged['prompts']:.0f}, "
          f"{args.backend}, medians of {args.repeats}")
    print(f"raw     {raw['seconds']:8.2f} s  {raw['generations_per_s']:8.1f} generations/s  "
          f"{raw['tokens_per_s']:8.1f} tokens/s")
    print(f"judge   {judged['seconds']:8.2f} s  {judged['prompts_per_s']:8.1f} prompts/s  "
          f"{judged['answers_per_s']:8.1f} answers/s  {judged['calls']:.0f} calls")
    print(f"resume  {resumed['seconds']:8.2f} s  {resumed['answers_per_s']:8.0f} answers/s  "
          f"{resumed['calls']:.0f} calls  hit rate {resumed['hit_rate']:.3f}")
    print(f"judge prompts/s / raw generations/s = "
          f"{judged['prompts_per_s'] / raw['generations_per_s']:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
