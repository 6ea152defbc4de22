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

References and payloads: a generator problem's reference is the item's answer, and its payload
(stored as JSON in the problems dataset) holds the item's question as the generator wrote it and
its `metadata` (domains/reasoning_gym_payload.py encodes what JSON lacks: tuples, sets, ...), so
`judge` rebuilds the item `{"question", "answer", "metadata"}` from the stored row alone and
scores it with the task's own `score_answer`, in any process. A proposer-written problem has no
reference (reasoning-gym cannot answer free text) unless its text is one this process generated:
run such rounds with `verify.labels = "majority"`. Scoring is the task's own `score_answer`
(`verify.compare = "auto"` or "task"), so partial credit (spell_backward, chain_sum) passes
through unchanged; `exact` and `math` are available too. The final answer is extracted by
`verify.extract` (the tiny model answers with the bare answer: use `["whole"]`). A problem
text is stored stripped of surrounding whitespace (some questions end in a space).

Departure: a proposer's problem counts for the level it writes in its text (it cannot be
recomputed). Tasks whose items cannot be verified from stored data (domains/
reasoning_gym_unusable.py, measured by bench/reasoning_gym_sweep.py) are refused at config
time. reasoning-gym is imported on first use (~1.9 s).

Time limit: a task's generator may stall on some seeds (number_sequence did for minutes). Every
dataset build and every item is generated under `[domain.reasoning_gym] item_seconds`
(`time_limit`); past it the stage stops with `GeneratorTooSlow`, one line naming the task,
level, seed and item, never retried. The limit is an exception raised asynchronously in the
generating thread, so it interrupts Python code (reasoning-gym's generators are Python) but not
a single long call into C, which ends first.
"""

from __future__ import annotations

import ctypes
import difflib
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from domains.base import (
    SOLVE_TAG,
    Domain,
    DomainInputError,
    Problem,
    ProblemRow,
    Rejected,
    read_payload,
)
from domains.checking import AnswerChecker, Judgement

if TYPE_CHECKING:
    from configs import RunConfig

HELDOUT_SEED = 0
GENERATOR_SEED = 2**31
_TEXT = re.compile(r"^([A-Za-z0-9_]+) L(\d+): (.+)$", re.DOTALL)
# The sweep's reasons a task is refused at config time (a slow generator is not refused: the
# `item_seconds` limit stops it when it stalls, and a higher limit may let it finish).
REFUSED = {"reference_not_full_score": "whose own references do not get the full score when "
                                       "judged from stored problem rows",
           "unstorable_metadata": "whose item metadata cannot be stored with its problems",
           "error": "whose generator fails at some curriculum level"}
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
    """One-line `DomainInputError` naming an unknown task, a task without a curriculum (levels
    need one), or one whose items cannot be verified from stored data
    (domains/reasoning_gym_unusable.py). The domain's constructor calls it, so the CLI refuses
    such a task before a run starts (flows/cli.py `_check_before_start`)."""
    from reasoning_gym.factory import CURRICULA, DATASETS

    from domains.reasoning_gym_unusable import UNUSABLE_TASKS

    for task in tasks:
        if task not in DATASETS:
            close = (difflib.get_close_matches(task, list(DATASETS), n=5)  # a typo, else kin
                     or sorted(n for n in DATASETS if n.split("_")[0] == task.split("_")[0])[:5])
            msg = (f"config error: domain.reasoning_gym.tasks names {task!r}, which is not a "
                   f"reasoning-gym dataset{f' (close: {close})' if close else ''}; see "
                   "reasoning_gym.factory.DATASETS")
            raise DomainInputError(msg)
        if task not in CURRICULA:
            msg = (f"config error: domain.reasoning_gym.tasks names {task!r}, which has no "
                   "reasoning-gym curriculum (levels need one); pick a task in "
                   "reasoning_gym.factory.CURRICULA")
            raise DomainInputError(msg)
        why = REFUSED.get(UNUSABLE_TASKS.get(task, ""))
        if why is not None:
            msg = (f"config error: domain.reasoning_gym.tasks names {task!r}, {why} "
                   "(bench/reasoning_gym_sweep.py, docs/workloads.md); leave it out of "
                   "domain.reasoning_gym.tasks")
            raise DomainInputError(msg)


class ReasoningGymDomain(Domain):
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
        self._generated: dict[str, Problem] = {}  # text -> the problem this process generated

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
        from domains.reasoning_gym_payload import encode_metadata

        problem = Problem(text=f"{task} L{level}: {entry['question']}".strip(),
                          reference=str(entry["answer"]), level=level, task=task,
                          payload={"question": entry["question"],
                                   "metadata": encode_metadata(entry.get("metadata", {}), task)})
        self._generated[problem.text] = problem
        return problem

    def task_of(self, text: str) -> str | None:
        parts = split_text(text)
        return parts[0] if parts else None

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
        return self._generated.get(text) or Problem(text=text, reference=None, level=level,
                                                    task=task)

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

    def _task_score(self, problem: ProblemRow):
        """The task's `score_answer` of (answer, label) on the item rebuilt from the row, by the
        task's dataset at the row's level."""
        from reasoning_gym.dataset import ProceduralDataset

        from domains.reasoning_gym_payload import decode_metadata

        task = problem.get("task") or self.task_of(problem["text"])
        payload = read_payload(problem)
        question = payload.get("question", self.question(problem["text"]))
        metadata = decode_metadata(payload["metadata"]) if "metadata" in payload else {}
        # the dataset of the item's own level: some scorers check its config (puzzle24's range)
        scorer = (self.dataset(task, problem["level"], GENERATOR_SEED).score_answer
                  if task is not None
                  else lambda answer, item: ProceduralDataset.score_answer(None, answer, item))

        def score(answer: str, reference: str) -> float:
            return scorer(answer, {"question": question, "answer": reference,
                                   "metadata": metadata})

        return score

    def verifier(self) -> str:
        """`@2`: scored on the item rebuilt from the stored row, by its level's dataset."""
        return f"reasoning_gym/{self.checker.describe()}@2"

    def judge(self, completions: list[str], problems: list[ProblemRow]) -> list[Judgement]:
        """A verdict per completion: `[verify]`'s extraction, then its comparison; with the
        task's scorer (`compare = "task"`), on the item rebuilt from the stored row."""
        out = []
        scorers: dict[int, Any] = {}  # one scorer per row object (verify shares a problem's)
        for completion, problem in zip(completions, problems, strict=True):
            try:
                if id(problem) not in scorers:
                    scorers[id(problem)] = self._task_score(problem)
                out.append(self.checker.judge(completion, problem["reference"],
                                              scorers[id(problem)]))
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                out.append(Judgement(None, "verifier_error"))  # a scorer refusing odd input
        return out

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
