"""Your own questions and answers: JSONL or Parquet files with a question and an answer column.

    file row  {"id": "q1", "question": "What is 7 * 6?", "answer": "42", "level": 2}
    problem   "What is 7 * 6?"   reference "42"   level 2
    solver    "<solve>What is 7 * 6? Answer: "  ->  "... the answer is \\boxed{42}"

Columns are named in `[domain.dataset]` (question_column, answer_column; optional level_column, read
as `difficulty` when no row has it, integers 1..5, else every row is level 1; optional id_column,
whose values must be unique; optional split_column). Held-out rows: the `heldout_path` file, else
the rows whose split column equals `heldout_split`, else a `heldout_fraction` drawn with
`heldout_seed`. Held-out questions never enter training or proposer output: a training row whose
question equals a held-out one after normalisation (whitespace collapsed, case folded) is dropped
from the pool, and a proposer text that normalises to a held-out question parses to that question,
so synthesize drops it as `heldout`. The generator draws pool rows of the requested level (any row
when the level has none). Answers are extracted and compared by `[verify]` (default math-verify
equivalence).

Checks: the CLI builds the domain before a run writes anything (flows/cli.py
`_check_before_start`), so a file that cannot be used is one line (`DatasetFileError`, exit 2)
naming the file, the 1-based line (JSONL) or row (Parquet) and the fix: missing, unreadable, not
UTF-8, a line that is not JSON or not a JSON object (`42`, `null`), empty, no such column,
duplicate or odd ids, a question that is not a string (an object is never used as its repr),
an answer that is not a string or a finite number, a level outside 1..5, a question longer than
`max_question_chars` or an answer longer than `max_answer_chars`, a `heldout_path` that is a
training file, or held-out rows that leave nothing to train on.

Prompts without answers: where a model or a function scores the answers (`verify.compare =
"judge"` or "reward_model", `verify.reward_function`), a file needs no answer column and a row's
answer may be missing or null; its problem has no reference, and the judge scores the answers to
it (held-out prompts included: a fixed judge, so promotion compares like with like). A file
without the column under another verifier is an error naming the key and these choices.

Self-instruct (`proposer_examples = k`): the proposer's prompt shows k training questions of the
requested level, the same k in every stage (drawn once per level with `heldout_seed`; never a
held-out one), and the proposer writes one more like them; with a file of prompts only and a
judge, that is a loop over instructions no program can check.

Departures: a proposer-written question that is not in the files has no reference (use
`verify.labels = "majority"`, or a judge) and counts as level 1.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from domains.base import SOLVE_TAG, Domain, DomainInputError, Problem, ProblemRow, Rejected
from domains.checking import AnswerChecker, Judgement

if TYPE_CHECKING:
    from configs import DatasetConfig, RunConfig

_SPACES = re.compile(r"\s+")
_ONE_OBJECT = 'write one JSON object per line, e.g. {"question": "What is 7 * 6?", "answer": "42"}'


class DatasetFileError(DomainInputError):
    """A question/answer file cannot be used; the message is one line naming the file (and the
    line or row) and the fix."""


def normalise_question(text: str) -> str:
    return _SPACES.sub(" ", text.strip()).casefold()


def _kind(value: Any) -> str:
    """What a parsed value is, in JSON's words: `42` is a number, `None` is null."""
    if isinstance(value, bool):
        return "a boolean"
    kinds = {dict: "a JSON object", list: "a JSON array", str: "a string", int: "a number",
             float: "a number", type(None): "null"}
    return kinds.get(type(value), f"a {type(value).__name__} value")


def _shown(value: Any) -> str:
    """A bad value as an error message shows it: its repr, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _read_jsonl(path: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, row) of each non-blank line of a JSON Lines file; `where` is `path line N`, N the
    1-based line of the file (blank lines counted; lines end at a newline only, since a JSON
    string may hold U+2028). A line that is not UTF-8, not JSON or not a JSON object is a
    one-line error."""
    try:
        data = Path(path).read_bytes().removeprefix(codecs.BOM_UTF8)
    except OSError as exc:
        raise DatasetFileError(f"dataset error: {path}: cannot read it ({exc.strerror}); check "
                               "its permissions") from None
    rows = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            row = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise DatasetFileError(f"dataset error: {where}: not UTF-8 text at byte offset "
                                   f"{exc.start} of the line; save the file as UTF-8") from None
        except json.JSONDecodeError as exc:
            raise DatasetFileError(f"dataset error: {where}: not JSON ({exc.msg} at column "
                                   f"{exc.colno}); {_ONE_OBJECT}") from None
        except (ValueError, RecursionError) as exc:  # nested too deeply, a 5000-digit number
            raise DatasetFileError(f"dataset error: {where}: unusable JSON "
                                   f"({str(exc) or type(exc).__name__}); {_ONE_OBJECT}") from None
        if not isinstance(row, dict):
            raise DatasetFileError(f"dataset error: {where}: {_kind(row)}, not a JSON "
                                   f"object; {_ONE_OBJECT}")
        rows.append((where, row))
    return rows


def read_file(path: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, row) of each row of one .jsonl or .parquet file, `where` naming the file and the
    row's line (JSONL) or 1-based row (Parquet) for the errors; a file that cannot be read is a
    one-line `DatasetFileError`."""
    file = Path(path)
    if not file.is_file():
        raise DatasetFileError(f"dataset error: {path}: no such file (check domain.dataset.paths)")
    if file.suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(path)
    if file.suffix != ".parquet":
        raise DatasetFileError(f"dataset error: {path}: unknown file type {file.suffix!r}; use "
                               ".jsonl or .parquet")
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file).to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DatasetFileError(f"dataset error: {path}: not a readable Parquet file ({first}); "
                               "write it with pyarrow or polars, or use .jsonl") from None
    return [(f"{path} row {index}", row) for index, row in enumerate(table, start=1)]


def _text(where: str, row: dict[str, Any], column: str, what: str, limit: tuple[str, int]
          ) -> str:
    """The row's question or answer as stripped text: present, a string (an answer may be a
    number), not empty, at most `limit` = (its key, its value) characters."""
    value = row.get(column)
    if value is None:
        raise DatasetFileError(f"dataset error: {where}: no {what} (column {column!r} is missing "
                               f"or null); give every row a {what}, or set "
                               f"domain.dataset.{what}_column")
    number = what == "answer" and isinstance(value, int | float) and not isinstance(value, bool)
    if number and not math.isfinite(value):
        raise DatasetFileError(f"dataset error: {where}: the answer {value!r} is not a finite "
                               "number; write the answer as text")
    if not (number or isinstance(value, str)):
        kinds = "text or a number" if what == "answer" else "text"
        raise DatasetFileError(f"dataset error: {where}: the {what} (column {column!r}) is "
                               f"{_kind(value)}, not {kinds}; write it as one string")
    text = str(value).strip()
    if not text:
        raise DatasetFileError(f"dataset error: {where}: empty {what} (column {column!r})")
    key, most = limit
    if len(text) > most:
        raise DatasetFileError(f"dataset error: {where}: the {what} is {len(text):,} characters, "
                               f"more than domain.dataset.{key} = {most:,}; shorten it, leave the "
                               f"row out, or raise domain.dataset.{key}")
    return text


def _checked_row(where: str, row: dict[str, Any], cfg: DatasetConfig, level_key: str, *,
                 answers_optional: bool = False) -> dict[str, Any]:
    """One file row as {question, answer, level, split}, every value checked (one-line errors);
    `answers_optional`: a row without an answer (or with a null one) has answer None."""
    question = _text(where, row, cfg.question_column, "question",
                     ("max_question_chars", cfg.max_question_chars))
    answer = (None if answers_optional and row.get(cfg.answer_column) is None else
              _text(where, row, cfg.answer_column, "answer",
                    ("max_answer_chars", cfg.max_answer_chars)))
    level = row.get(level_key, 1)
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 5:
        raise DatasetFileError(f"dataset error: {where}: level {_shown(level)} (column "
                               f"{level_key!r}) is not an integer 1..5")
    return {"question": _SPACES.sub(" ", question), "answer": answer, "level": level,
            "split": row.get(cfg.split_column)}


def load_rows(paths: list[str], cfg: DatasetConfig, *,
              answers_optional: bool = False) -> list[dict[str, Any]]:
    """Rows {question, answer, level, split} of `paths`, checked (one-line errors naming the
    file and line); ids (`id_column`) must be unique across all of `paths`. With
    `answers_optional` (a model or function judges the answers) a file needs no answer column
    and a row's answer may be missing (None)."""
    rows, ids = [], set()
    for path in paths:
        raw = read_file(path)
        if not raw:
            raise DatasetFileError(f"dataset error: {path}: the file has no rows")
        first_where, first = raw[0]
        required = [("question", cfg.question_column)]
        if not answers_optional:
            required.append(("answer", cfg.answer_column))
        for key, column in required:
            if column not in first:
                hint = (" (prompts without answers: judge them with verify.compare = 'judge',"
                        " 'reward_model' or verify.reward_function)" if key == "answer" else "")
                raise DatasetFileError(
                    f"dataset error: {first_where}: no column {column!r} (columns: "
                    f"{sorted(first)}); set domain.dataset.{key}_column{hint}")
        has_level = any(cfg.level_column in row for _, row in raw)
        level_key = cfg.level_column if has_level else "difficulty"
        for where, row in raw:
            row_id = row.get(cfg.id_column)
            if row_id is not None:
                if isinstance(row_id, bool) or not isinstance(row_id, str | int):
                    raise DatasetFileError(f"dataset error: {where}: id {_shown(row_id)} (column "
                                           f"{cfg.id_column!r}) is not text or an integer")
                if row_id in ids:
                    raise DatasetFileError(f"dataset error: {where}: duplicate id {_shown(row_id)} "
                                           "(ids must be unique)")
                ids.add(row_id)
            rows.append(_checked_row(where, row, cfg, level_key,
                                     answers_optional=answers_optional))
    return rows


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def split_rows(rows: list[dict[str, Any]], cfg: DatasetConfig, *, answers_optional: bool = False
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pool, held-out): the heldout_path file, the split column, or a fixed-seed fraction; pool
    rows whose normalised question is held out are dropped. An empty pool is an error naming
    the key that decided the held-out rows."""
    if cfg.heldout_path is not None:
        same = next((p for p in cfg.paths if _same_file(p, cfg.heldout_path)), None)
        if same is not None:
            raise DatasetFileError(
                f"dataset error: domain.dataset.heldout_path = {cfg.heldout_path!r} is the "
                f"training file {same!r} of domain.dataset.paths, so every row would be held "
                "out; set domain.dataset.heldout_path to a separate file of held-out questions, "
                "or remove it to hold out a fraction of the rows (heldout_fraction)")
        heldout = load_rows([cfg.heldout_path], cfg, answers_optional=answers_optional)
        why = (f"every question of domain.dataset.paths is also in domain.dataset.heldout_path "
               f"{cfg.heldout_path!r}; add training rows, or hold out other questions")
    elif any(r["split"] == cfg.heldout_split for r in rows):
        heldout = [r for r in rows if r["split"] == cfg.heldout_split]
        why = (f"every row has {cfg.split_column} = {cfg.heldout_split!r} (domain.dataset."
               "heldout_split); give training rows another split value")
    else:
        count = max(1, round(cfg.heldout_fraction * len(rows)))
        chosen = set(random.Random(cfg.heldout_seed).sample(range(len(rows)), count))
        heldout = [r for index, r in enumerate(rows) if index in chosen]
        why = (f"holding out {count} of {len(rows)} rows (domain.dataset.heldout_fraction = "
               f"{cfg.heldout_fraction}) leaves none whose question is not held out; add rows")
    held = {normalise_question(r["question"]) for r in heldout}
    pool = [r for r in rows if normalise_question(r["question"]) not in held]
    if not pool:
        raise DatasetFileError(f"dataset error: no training rows: {why}")
    return pool, heldout


def style_draw(pool: list[dict[str, Any]], level: int, count: int, seed: int) -> list[str]:
    """`count` pool questions of `level` drawn with (`seed`, `level`), rows of other levels
    completing a level with fewer: the same questions on every call, in any process."""
    rng = random.Random(f"{seed}:{level}")
    own = [r["question"] for r in pool if r["level"] == level]
    rest = [r["question"] for r in pool if r["level"] != level]
    return (rng.sample(own, min(count, len(own)))
            + rng.sample(rest, min(max(0, count - len(own)), len(rest))))


def answers_judged_without_reference(config: RunConfig) -> bool:
    """Whether the run's answers are scored by a model or a function (`verify.compare = "judge"`
    or "reward_model", `verify.reward_function`) that needs no reference: then the files may
    hold prompts without answers."""
    from configs.domain import MODEL_VERIFIERS

    verify = config.verify
    return verify.compare in MODEL_VERIFIERS or verify.reward_function is not None


class DatasetDomain(Domain):
    """The question/answer files of `[domain.dataset]`."""

    name = "dataset"

    def __init__(self, config: RunConfig) -> None:
        cfg = config.domain.dataset
        if not cfg.paths:
            raise DatasetFileError("dataset error: domain.dataset.paths is empty; name your "
                                   "JSONL or Parquet file(s), e.g. paths = ['data/train.jsonl']")
        optional = answers_judged_without_reference(config)
        self.pool, self._heldout = split_rows(
            load_rows(cfg.paths, cfg, answers_optional=optional), cfg, answers_optional=optional)
        self.levels = tuple(sorted({r["level"] for r in self.pool + self._heldout}))
        self._known = {normalise_question(r["question"]): r for r in self.pool + self._heldout}
        self.checker = AnswerChecker.from_config(config.verify, default_compare="math")
        self._example_count, self._example_seed = cfg.proposer_examples, cfg.heldout_seed
        self._examples: dict[int, list[str]] = {}  # level -> its draw (a prompt per proposal)

    def parse(self, proposal: str) -> Problem | Rejected:
        text = _SPACES.sub(" ", proposal.strip())
        if not text:
            return Rejected("empty")
        row = self._known.get(normalise_question(text))
        if row is None:
            return Problem(text=text, reference=None, level=1)
        return Problem(text=row["question"], reference=row["answer"], level=row["level"])

    def style_examples(self, level: int) -> list[str]:
        """Self-instruct (`proposer_examples`): the training questions of `level` the proposer
        is shown, drawn once per level (any level's when `level` has too few)."""
        if level not in self._examples:
            self._examples[level] = style_draw(self.pool, level, self._example_count,
                                               self._example_seed)
        return list(self._examples[level])

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
