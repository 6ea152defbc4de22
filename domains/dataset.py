"""Your own questions and answers: JSONL or Parquet files with a question and an answer column.

    file row  {"id": "q1", "question": "What is 7 * 6?", "answer": "42", "level": 2}
    problem   "What is 7 * 6?"   reference "42"   level 2
    solver    "<solve>What is 7 * 6? Answer: "  ->  "... the answer is \\boxed{42}"

Columns are named in `[domain.dataset]` (question_column, answer_column; optional level_column,
read as `difficulty` when absent, integers 1..5, else every row is level 1; optional id_column,
whose values must be unique; optional split_column). Held-out rows: the `heldout_path` file, else
the rows whose split column equals `heldout_split`, else a `heldout_fraction` drawn with
`heldout_seed`. Held-out questions never enter training or proposer output: a training row whose
question equals a held-out one after normalisation (whitespace collapsed, case folded) is dropped
from the pool, and a proposer text that normalises to a held-out question parses to that question,
so synthesize drops it as `heldout`. The generator draws pool rows of the requested level (any
row when the level has none). Answers are extracted and compared by `[verify]` (default
math-verify equivalence). A file that cannot be used (missing, unreadable, empty, no such column,
duplicate ids) is a one-line error when the run starts, before anything runs.

Departures: a proposer-written question that is not in the files has no reference (use
`verify.labels = "majority"`) and counts as level 1.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from domains.base import SOLVE_TAG, Domain, Problem, ProblemRow, Rejected
from domains.checking import AnswerChecker, Judgement

if TYPE_CHECKING:
    from configs import DatasetConfig, RunConfig

_SPACES = re.compile(r"\s+")


class DatasetFileError(ValueError):
    """A question/answer file cannot be used; the message is one line naming the file and fix."""


def normalise_question(text: str) -> str:
    return _SPACES.sub(" ", text.strip()).casefold()


def read_file(path: str) -> list[dict[str, Any]]:
    """The rows of one .jsonl or .parquet file, or a one-line `DatasetFileError`."""
    file = Path(path)
    if not file.is_file():
        raise DatasetFileError(f"dataset error: {path}: no such file (check domain.dataset.paths)")
    try:
        if file.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(file).to_pylist()
        if file.suffix in (".jsonl", ".ndjson"):
            import json

            return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DatasetFileError(f"dataset error: {path}: unreadable ({first}); write one JSON "
                               "object per line, or a Parquet file") from None
    raise DatasetFileError(f"dataset error: {path}: unknown file type {file.suffix!r}; use "
                           ".jsonl or .parquet")


def load_rows(paths: list[str], cfg: DatasetConfig) -> list[dict[str, Any]]:
    """Rows {question, answer, level, id, split} of `paths`, checked (one-line errors)."""
    rows, ids = [], set()
    for path in paths:
        raw = read_file(path)
        if not raw:
            raise DatasetFileError(f"dataset error: {path}: the file has no rows")
        for key, column in (("question", cfg.question_column), ("answer", cfg.answer_column)):
            if column not in raw[0]:
                raise DatasetFileError(
                    f"dataset error: {path}: no column {column!r} (columns: {sorted(raw[0])}); "
                    f"set domain.dataset.{key}_column")
        level_key = cfg.level_column if cfg.level_column in raw[0] else "difficulty"
        for index, row in enumerate(raw):
            question, answer = row.get(cfg.question_column), row.get(cfg.answer_column)
            if question is None or answer is None or not str(question).strip():
                raise DatasetFileError(f"dataset error: {path} row {index + 1}: empty question "
                                       "or answer")
            level = row.get(level_key, 1)
            if not isinstance(level, int) or not 1 <= level <= 5:
                raise DatasetFileError(f"dataset error: {path} row {index + 1}: level {level!r} "
                                       "is not an integer 1..5")
            row_id = row.get(cfg.id_column)
            if row_id is not None:
                if row_id in ids:
                    raise DatasetFileError(f"dataset error: {path} row {index + 1}: duplicate "
                                           f"id {row_id!r} (ids must be unique)")
                ids.add(row_id)
            rows.append({"question": _SPACES.sub(" ", str(question).strip()),
                         "answer": str(answer).strip(), "level": level,
                         "split": row.get(cfg.split_column)})
    return rows


def split_rows(rows: list[dict[str, Any]], cfg: DatasetConfig
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pool, held-out): the heldout_path file, the split column, or a fixed-seed fraction; pool
    rows whose normalised question is held out are dropped."""
    if cfg.heldout_path is not None:
        heldout = load_rows([cfg.heldout_path], cfg)
    elif any(r["split"] == cfg.heldout_split for r in rows):
        heldout = [r for r in rows if r["split"] == cfg.heldout_split]
    else:
        count = max(1, round(cfg.heldout_fraction * len(rows)))
        chosen = set(random.Random(cfg.heldout_seed).sample(range(len(rows)), count))
        heldout = [r for index, r in enumerate(rows) if index in chosen]
    held = {normalise_question(r["question"]) for r in heldout}
    pool = [r for r in rows if normalise_question(r["question"]) not in held]
    if not pool:
        raise DatasetFileError("dataset error: every row is held out; add rows or lower "
                               "domain.dataset.heldout_fraction")
    return pool, heldout


class DatasetDomain(Domain):
    """The question/answer files of `[domain.dataset]`."""

    name = "dataset"

    def __init__(self, config: RunConfig) -> None:
        cfg = config.domain.dataset
        if not cfg.paths:
            raise DatasetFileError("dataset error: domain.dataset.paths is empty; name your "
                                   "JSONL or Parquet file(s), e.g. paths = ['data/train.jsonl']")
        self.pool, self._heldout = split_rows(load_rows(cfg.paths, cfg), cfg)
        self.levels = tuple(sorted({r["level"] for r in self.pool + self._heldout}))
        self._known = {normalise_question(r["question"]): r for r in self.pool + self._heldout}
        self.checker = AnswerChecker.from_config(config.verify, default_compare="math")

    def parse(self, proposal: str) -> Problem | Rejected:
        text = _SPACES.sub(" ", proposal.strip())
        if not text:
            return Rejected("empty")
        row = self._known.get(normalise_question(text))
        if row is None:
            return Problem(text=text, reference=None, level=1)
        return Problem(text=row["question"], reference=row["answer"], level=row["level"])

    def generate(self, rng: random.Random, level: int) -> Problem:
        rows = [r for r in self.pool if r["level"] == level] or self.pool
        row = rows[rng.randrange(len(rows))]
        return Problem(text=row["question"], reference=row["answer"], level=row["level"])

    def solver_prompt(self, problem_text: str) -> str:
        return f"{SOLVE_TAG}{problem_text} Answer: "

    def question(self, problem_text: str) -> str:
        """What a chat model's user message asks (domains/chat.py): the question itself."""
        return problem_text

    def extract(self, completion: str) -> str | None:
        return self.checker.extract(completion)

    def verifier(self) -> str:
        return f"dataset/{self.checker.describe()}@1"

    def judge(self, completions: list[str], problems: list[ProblemRow]) -> list[Judgement]:
        """`[verify]`'s extraction and comparison against each row's reference."""
        return [self.checker.judge(c, p["reference"])
                for c, p in zip(completions, problems, strict=True)]

    def heldout(self, per_level: int) -> list[Problem]:
        """The first `per_level` held-out rows of each level, in file order."""
        out: list[Problem] = []
        for level in self.levels:
            rows = [r for r in self._heldout if r["level"] == level][:per_level]
            out += [Problem(text=r["question"], reference=r["answer"], level=level) for r in rows]
        return out
