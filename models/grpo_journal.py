"""The GRPO reward's judgements as data: under an LLM judge (`verify.compare = "judge"`) each
call of the reward (models/grpo.py `verifier_reward`) writes the judgements of its completions
into the pass's work folder, and the train stage stores them as its `judgements` dataset
(tasks/train.py), as verify stores its own (tasks/judgements.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from domains.base import Domain
    from domains.judge import ModelJudge

JOURNAL = "judgements"  # the folder of a GRPO pass's judgements, in its work_dir


class JudgementJournal:
    """The judgements an LLM judge gave the GRPO reward, one Parquet part per reward call:
    `<folder>/step-0000003-rank-000-call-000.parquet`, the `judgements` table of the call's
    completions (domains/judge_rows.py) with `rollout_id` `grpo/<step>/<rank>/<call>/<index>`
    and null `run_id` and `round` (the train stage fills them in when it stores the parts:
    `read_journal`). `step` is the trainer's global step when the reward was asked, `call`
    counts the calls of that step in this process: a pass resumed from a trainer checkpoint
    asks for the steps after it again and writes the same parts again, so a step is never
    stored twice; the judge is given the parts already written first (`recall`), so what it
    already answered is not sent again. Only a domain judged by an LLM judge has one
    (models/grpo.py `verifier_reward`)."""

    def __init__(self, folder: Path, judge: ModelJudge) -> None:
        self.folder = folder
        self.judge = judge
        self.rank = int(os.environ.get("RANK", "0"))  # accelerate's, in a launched pass
        self.calls: dict[int, int] = {}

    def recall(self) -> int:
        """Give the judge the replies of every part already written (a resumed pass's); how
        many distinct prompts it was given."""
        from domains.judge_rows import remember_stored

        if not self.folder.is_dir():
            return 0
        return sum(remember_stored(self.judge, part)
                   for part in sorted(self.folder.glob("*.parquet")))

    def write(self, domain: Domain, step: int, completions: list[str],
              problems: list[dict[str, Any]], problem_ids: list[str]) -> None:
        """One reward call's judgements: `completions` judged against `problems` (the judge
        has replied to them already; `domain` renders the questions)."""
        import polars as pl

        from domains.judge_rows import JUDGED_COLUMNS, judgement_frame
        from storage.datasets import write_atomic

        call = self.calls.get(step, 0)
        self.calls[step] = call + 1
        prefix = f"grpo/{step}/{self.rank}/{call}"
        rollouts = pl.DataFrame(
            {"rollout_id": [f"{prefix}/{i}" for i in range(len(completions))],
             "run_id": [None] * len(completions), "round": [None] * len(completions),
             "problem_id": problem_ids, "completion": completions},
            schema={"rollout_id": pl.String, "run_id": pl.String, "round": pl.Int64,
                    "problem_id": pl.String, "completion": pl.String})
        problems_frame = pl.DataFrame(
            [{"problem_id": pid, **{c: row.get(c) for c in JUDGED_COLUMNS}}
             for pid, row in zip(problem_ids, problems, strict=True)],
            schema={"problem_id": pl.String, **dict.fromkeys(JUDGED_COLUMNS, pl.String),
                    "level": pl.Int64})
        name = f"step-{step:07d}-rank-{self.rank:03d}-call-{call:03d}.parquet"
        write_atomic("judgements", judgement_frame(self.judge, domain, rollouts, problems_frame),
                     self.folder / name)


def read_journal(folders: list[Path], run_id: str, round_index: int) -> pl.DataFrame | None:
    """The judgements of every GRPO pass's journal among `folders`, in step order, with the
    run's id and round filled in; None when no pass wrote any."""
    import polars as pl

    from storage.datasets import read_table

    parts = sorted(p for folder in folders if folder.is_dir()
                   for p in folder.glob("step-*.parquet"))
    if not parts:
        return None
    frame = pl.concat([pl.from_arrow(read_table(p)) for p in parts], how="vertical")
    return frame.with_columns(pl.lit(run_id, dtype=pl.String).alias("run_id"),
                              pl.lit(round_index, dtype=pl.Int64).alias("round"))
