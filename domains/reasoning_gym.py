"""reasoning-gym tasks: procedural generators with verifiers and curricula, one task or a mix.

    problem   "basic_arithmetic L2: Calculate -( 20 + 67 + -59 )."   reference "-28"
    solver    "<solve>Calculate -( 20 + 67 + -59 ). Answer: "         ->  "-28"
    proposer  "<propose>L2:"  ->  "basic_arithmetic L2: Calculate 4 * 7."

A problem's text records its task and level (`<task> L<level>: <question>`), so every row that
carries a problem (proposals, problems, and through its id every rollout, verdict and training
row) records its task; the solver sees the question alone. Level L is the task curriculum's
global level L - 1 (`create_curriculum(task).set_global_level(L - 1)`; an attribute with fewer
levels stays at its hardest). Tasks are drawn by the weights of `[domain.reasoning_gym] tasks`.

Seeds: reasoning-gym derives item i of a dataset from `Random(seed + i)`. Held-out items use
dataset seed 0 and items 0, 1, 2, ... (seeds below 2**31); the generator (warm-up, generator
rounds, top-up) uses dataset seed 2**31 and item indices drawn from the stage's rng, so it never
draws a held-out seed, and synthesize drops any text equal to a held-out one (`heldout`). The
held-out set is `heldout_per_level` distinct items per task and level, identical on every call.

References: the generator's answer, kept in this process by text (the stage that generates a
problem also admits it). A proposer-written problem has no reference (reasoning-gym cannot
answer free text): run such rounds with `verify.labels = "majority"`. Scoring is the task's own
`score_answer` (`verify.compare = "auto"` or "task"), so partial credit (spell_backward,
chain_sum) passes through unchanged; `exact` and `math` are available too. The final answer is
extracted by `verify.extract` (the tiny model answers with the bare answer: use `["whole"]`).

Departures: a proposer's problem counts for the level it writes in its text (it cannot be
recomputed); `score` without problem texts (the GRPO reward) uses the task's scorer when the
run has one task, else reasoning-gym's generic scorer (exact match, partial credit when the
reference is contained in the answer). reasoning-gym is imported on first use (~1.9 s).

Time limit: a task's generator may stall on some seeds (number_sequence did for minutes). Every
dataset build and every item is generated under `[domain.reasoning_gym] item_seconds`
(`time_limit`); past it the stage stops with `GeneratorTooSlow`, one line naming the task,
level, seed and item, never retried. The limit is an exception raised asynchronously in the
generating thread, so it interrupts Python code (reasoning-gym's generators are Python) but not
a single long call into C, which ends first.
"""

from __future__ import annotations

import ctypes
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from domains.base import SOLVE_TAG, Problem, Rejected, digit_shape, level_prompt
from domains.checking import AnswerChecker, Judgement

if TYPE_CHECKING:
    from configs import RunConfig

HELDOUT_SEED = 0
GENERATOR_SEED = 2**31
_TEXT = re.compile(r"^([A-Za-z0-9_]+) L(\d+): (.+)$", re.DOTALL)
_HELDOUT_ATTEMPTS = 50  # draws per wanted held-out item before a small task space gives up


class GeneratorTooSlow(ValueError):
    """A task's generator took longer than `item_seconds` for one item (deterministic for its
    seed, so never retried)."""


class _Expired(GeneratorTooSlow):
    """Raised asynchronously in the generating thread when its time is up."""


def _raise_in(thread_id: int, exception: type[BaseException] | None) -> None:
    """Raise `exception` in the thread `thread_id` at its next bytecode (None: take back one
    not yet raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               None if exception is None
                                               else ctypes.py_object(exception))


class _Watchdog:
    """One daemon thread per process that raises `_Expired` in a thread whose deadline passed
    (arming and disarming are a lock each: no thread is started per item)."""

    POLL_SECONDS = 0.05

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deadlines: dict[object, tuple[float, int]] = {}  # key -> (deadline, thread id)
        self._fired: set[object] = set()
        self._thread: threading.Thread | None = None

    def arm(self, key: object, seconds: float) -> None:
        with self._lock:
            self._deadlines[key] = (time.monotonic() + seconds, threading.get_ident())
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="generator-watchdog",
                                                daemon=True)
                self._thread.start()

    def disarm(self, key: object) -> None:
        with self._lock:
            self._deadlines.pop(key, None)
            if key in self._fired:
                self._fired.discard(key)
                _raise_in(threading.get_ident(), None)  # fired as the block ended: take it back

    def _watch(self) -> None:
        while True:
            time.sleep(self.POLL_SECONDS)
            now = time.monotonic()
            with self._lock:
                for key, (deadline, thread_id) in list(self._deadlines.items()):
                    if deadline <= now:
                        del self._deadlines[key]
                        self._fired.add(key)
                        _raise_in(thread_id, _Expired)


_WATCHDOG = _Watchdog()


@contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Run the block under a wall-clock limit (checked every `_Watchdog.POLL_SECONDS`): past
    `seconds`, GeneratorTooSlow naming `what`."""
    key = object()
    _WATCHDOG.arm(key, seconds)
    try:
        yield
    except _Expired:
        msg = (f"{what} took more than {seconds:g} s to generate; leave the task out of "
               "domain.reasoning_gym.tasks or raise domain.reasoning_gym.item_seconds")
        raise GeneratorTooSlow(msg) from None
    finally:
        _WATCHDOG.disarm(key)


def split_text(text: str) -> tuple[str, int, str] | None:
    """`"lcm L2: Find ..."` -> ("lcm", 2, "Find ..."); None when the text has no task tag."""
    match = _TEXT.match(text.strip())
    return (match.group(1), int(match.group(2)), match.group(3)) if match else None


def check_tasks(tasks: dict[str, float]) -> None:
    """One-line error naming an unknown task, or a task without a curriculum (levels need one)."""
    from reasoning_gym.factory import CURRICULA, DATASETS

    for task in tasks:
        if task not in DATASETS:
            close = sorted(n for n in DATASETS if n.split("_")[0] == task.split("_")[0])[:5]
            msg = (f"config error: domain.reasoning_gym.tasks names {task!r}, which is not a "
                   f"reasoning-gym dataset{f' (close: {close})' if close else ''}; see "
                   "reasoning_gym.factory.DATASETS")
            raise ValueError(msg)
        if task not in CURRICULA:
            msg = (f"config error: domain.reasoning_gym.tasks names {task!r}, which has no "
                   "reasoning-gym curriculum (levels need one); pick a task in "
                   "reasoning_gym.factory.CURRICULA")
            raise ValueError(msg)


class ReasoningGymDomain:
    """The reasoning-gym tasks of `[domain.reasoning_gym]`, levels 1..`domain.max_level`."""

    name = "reasoning_gym"

    def __init__(self, config: RunConfig | None = None) -> None:
        from configs import RunConfig

        config = config or RunConfig(domain={"name": "reasoning_gym"})
        weights = config.domain.reasoning_gym.tasks
        check_tasks(weights)
        self.tasks = tuple(weights)
        self.weights = tuple(weights[t] for t in self.tasks)
        self.levels = tuple(range(1, config.domain.max_level + 1))
        self.item_seconds = config.domain.reasoning_gym.item_seconds
        self.checker = AnswerChecker.from_config(config.verify, default_compare="task")
        self._datasets: dict[tuple[str, int, int], Any] = {}
        self._entries: dict[str, dict[str, Any]] = {}  # text -> the generator's entry

    def dataset(self, task: str, level: int, seed: int) -> Any:
        """The reasoning-gym dataset of `task` at `level` (curriculum global level - 1)."""
        key = (task, level, seed)
        if key not in self._datasets:
            from reasoning_gym.factory import DATASETS, create_curriculum

            curriculum = create_curriculum(task)
            curriculum.set_global_level(level - 1)
            settings = curriculum.generate_configuration({"seed": seed, "size": 1})
            with time_limit(self.item_seconds,
                            f"reasoning-gym task {task!r} (level {level}, dataset seed {seed})"):
                self._datasets[key] = DATASETS[task][0](config=settings)
        return self._datasets[key]

    def _item(self, task: str, level: int, seed: int, index: int) -> Problem:
        dataset = self.dataset(task, level, seed)
        with time_limit(self.item_seconds, f"reasoning-gym task {task!r} (level {level}, "
                                           f"dataset seed {seed}, item {index})"):
            entry = dataset[index]
        text = f"{task} L{level}: {entry['question']}"
        self._entries[text] = entry
        return Problem(text=text, reference=str(entry["answer"]), level=level)

    def task_of(self, text: str) -> str | None:
        parts = split_text(text)
        return parts[0] if parts else None

    def proposer_prompt(self, level: int) -> str:
        return level_prompt(level)

    def shape(self, problem_text: str) -> str:
        """Every digit as 0, as for arithmetic."""
        return digit_shape(problem_text)

    def parse(self, proposal: str) -> Problem | Rejected:
        text = proposal.strip()
        if not text:
            return Rejected("empty")
        parts = split_text(text)
        if parts is None:
            return Rejected("malformed")
        task, level, _ = parts
        if task not in self.tasks:
            return Rejected("unknown_task")
        if level not in self.levels:
            return Rejected("unknown_level")
        entry = self._entries.get(text)
        return Problem(text=text, reference=None if entry is None else str(entry["answer"]),
                       level=level)

    def generate(self, rng: random.Random, level: int) -> Problem:
        task = rng.choices(self.tasks, weights=self.weights)[0]
        return self.generate_task(rng, task, level)

    def generate_task(self, rng: random.Random, task: str, level: int) -> Problem:
        """A generator problem of `task` at `level` (seeds the held-out set never uses)."""
        return self._item(task, level, GENERATOR_SEED, rng.randrange(2**31))

    def solver_prompt(self, problem_text: str) -> str:
        return f"{SOLVE_TAG}{self.question(problem_text)} Answer: "

    def question(self, problem_text: str) -> str:
        """The question without its task tag (a chat model's user message: domains/chat.py)."""
        parts = split_text(problem_text)
        return parts[2] if parts else problem_text

    def extract(self, completion: str) -> str | None:
        return self.checker.extract(completion)

    def _task_score(self, task: str | None, text: str | None):
        from reasoning_gym.dataset import ProceduralDataset

        entry = self._entries.get(text or "", {})
        scorer = (self.dataset(task, 1, GENERATOR_SEED).score_answer if task in self.tasks
                  else lambda answer, item: ProceduralDataset.score_answer(None, answer, item))

        def score(answer: str, reference: str) -> float:
            return scorer(answer, {"question": entry.get("question", ""), "answer": reference,
                                   "metadata": entry.get("metadata", {})})

        return score

    def judge(self, completions: list[str], references: list[str | None],
              texts: list[str] | None = None) -> list[Judgement]:
        """A verdict per completion; `texts` (the problems' texts) choose each task's scorer."""
        single = self.tasks[0] if len(self.tasks) == 1 else None
        out = []
        for index, (completion, reference) in enumerate(zip(completions, references,
                                                            strict=True)):
            text = texts[index] if texts is not None else None
            task = self.task_of(text) if text is not None else single
            try:
                out.append(self.checker.judge(completion, reference,
                                              self._task_score(task, text)))
            except (KeyError, TypeError, ValueError, IndexError):  # a scorer needing metadata
                out.append(Judgement(None, "verifier_error"))
        return out

    def score(self, completions: list[str], references: list[str | None]) -> list[float | None]:
        return [j.reward for j in self.judge(completions, references)]

    def heldout(self, per_level: int) -> list[Problem]:
        items: list[Problem] = []
        for task in self.tasks:
            for level in self.levels:
                seen: set[str] = set()
                for index in range(per_level * _HELDOUT_ATTEMPTS):
                    if len(seen) == per_level:
                        break
                    problem = self._item(task, level, HELDOUT_SEED, index)
                    if problem.text not in seen:
                        seen.add(problem.text)
                        items.append(problem)
        return items
