"""Python programs with their inputs and outputs, Absolute Zero style: the sandbox grounds labels.

The proposer writes a small pure function `f` and its inputs; the sandbox runs it twice (on two
workers) to get the outputs and to reject non-determinism. A problem's text holds the mode, the
program and each call with its output; the solver prompt shows only what the mode allows:

    deduction  text    "deduction: def f(x): return x*3+1 >>> f(4) == 13"
               solver  "<solve>deduction: def f(x): return x*3+1 >>> f(4) == "   ->  "13"
    abduction  text    "abduction: def f(x): return x*3+1 >>> f(4) == 13"
               solver  "<solve>abduction: def f(x): return x*3+1 >>> f(?) == 13 >>> f("
                       ->  "4)"   (any input giving 13 is right: it is run to check)
    induction  text    "induction: def f(x): return x*3+1 >>> f(1) == 4 >>> f(2) == 7
                        >>> f(5) == 16 >>> f(0) == 1"
               solver  "<solve>induction: f(1) == 4 >>> f(2) == 7 >>> "
                       ->  "def f(x): return x*3+1"   (run on the hidden calls f(5), f(0))

The proposer may write the outputs (`== 13`) or leave them out: they are recomputed. Induction
shows the first half of its 2..8 calls and checks on the rest. References: deduction the output;
abduction and induction a JSON object (mode, program or hidden calls, outputs) that `score` runs.

A proposal that cannot be admitted is `Rejected` with its reason: "empty", "malformed",
"too_long", or the sandbox's outcome ("forbidden" by the static check in domains/sandbox/policy.py
or at run time, "timeout", "memory", "crash", "output_limit", "nondeterministic"). synthesize
records the sandbox outcomes as the proposal's `drop_reason`, so `flywheel audit RUN drops` shows
why programs failed; verify records the sandbox outcome of each answer it ran (`outcome`). The
held-out set holds `heldout_per_level` problems per level in each mode the run trains (weight
> 0 in `[domain] modes`); abduction and induction answers are run in the sandbox to be scored.
`accuracy` and `accuracy_level_N` are over all its modes, `accuracy_task_<mode>` and
`accuracy_task_<mode>_level_N` per mode (a deduction-only run's held-out set is unchanged).

Departs from Absolute Zero: one-line programs of one function `f` with literal inputs (the tiny
model's tokenizer has no newline); the task mode is written by the proposer (the warm-up teaches
the configured mix) instead of being chosen per prompt; no reference tasks in the prompt.
"""

from __future__ import annotations

import ast
import json
import random
import re

from configs import RunConfig
from domains.base import SOLVE_TAG, Domain, Problem, ProblemRow, Rejected, digit_shape
from domains.checking import Judgement
from domains.programs import LEVELS, draw_input, draw_program, function_of, level_of
from domains.sandbox import Job, Limits, SandboxPool, canonical
from domains.sandbox.policy import check_program

MODES = ("deduction", "abduction", "induction")
SEPARATOR = " >>> "
MAX_PROGRAM_CHARS = 400
MAX_OUTPUT_CHARS = 80
MAX_CALLS = 8
_PROPOSAL = re.compile(r"^(deduction|abduction|induction): (.+)$", re.DOTALL)
_CALL = re.compile(r"^(f\(.*\))(?: == (.*))?$")
_CACHE = 100_000


def _args_text(args: tuple) -> str:
    """`(4,)` -> `4`, `(3, 'a')` -> `3, 'a'`: the argument list as written inside f(...)."""
    return ", ".join(canonical(a) for a in args)


def parse_call(text: str) -> tuple | None:
    """`f(4, [1, 2])` -> (4, [1, 2]): positional literal arguments only, else None."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "f"
            and not node.keywords and 1 <= len(node.args) <= 4):
        return None
    try:
        return tuple(ast.literal_eval(arg) for arg in node.args)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def canonical_answer(text: str) -> str:
    """An answer's canonical text: a Python literal as the sandbox writes outputs, else stripped."""
    text = text.strip()
    try:
        return canonical(ast.literal_eval(text))
    except Exception:  # noqa: BLE001 - any unreadable answer compares as its text
        return text


class PythonIODomain(Domain):
    """The python_io domain; `config` gives its mode mix ([domain] modes) and [sandbox] limits."""

    name = "python_io"
    levels = LEVELS

    def __init__(self, config: RunConfig | None = None) -> None:
        config = config or RunConfig()
        weights = config.domain.modes
        self.modes = [m for m in MODES if weights[m] > 0]
        self.weights = [weights[m] for m in self.modes]
        sandbox = config.sandbox
        self.pool = SandboxPool(
            Limits(cpu_seconds=sandbox.cpu_seconds, wall_seconds=sandbox.wall_seconds,
                   memory_mb=sandbox.memory_mb, max_file_bytes=sandbox.max_file_bytes,
                   max_output_bytes=sandbox.max_output_bytes, tmpfs_mb=sandbox.tmpfs_mb),
            workers=sandbox.workers, isolation=sandbox.isolation)
        self._parsed: dict[str, Problem | Rejected] = {}

    # ---- prompts ---------------------------------------------------------------------------

    def solver_prompt(self, problem_text: str) -> str:
        mode, program, calls = _split(problem_text)
        if mode == "deduction":
            return f"{SOLVE_TAG}{mode}: {program}{SEPARATOR}{calls[0][0]} == "
        if mode == "abduction":
            return f"{SOLVE_TAG}{mode}: {program}{SEPARATOR}f(?) == {calls[0][1]}{SEPARATOR}f("
        shown = SEPARATOR.join(f"{call} == {out}" for call, out in calls[:_visible(len(calls))])
        return f"{SOLVE_TAG}{mode}: {shown}{SEPARATOR}"

    def shape(self, problem_text: str) -> str:
        """Digits as 0 and string contents masked: programs of one template share a shape."""
        return digit_shape(re.sub(r"'[^']*'", "''", problem_text))

    # ---- admission -------------------------------------------------------------------------

    def parse(self, proposal: str) -> Problem | Rejected:
        text = proposal.strip()
        if text not in self._parsed:
            if len(self._parsed) >= _CACHE:
                self._parsed.clear()
            self._parsed[text] = self._admit([text])[0]
        return self._parsed[text]

    def prepare(self, proposals: list[str]) -> None:
        """Admit many proposals at once (one sandbox batch over every worker) into the cache
        `parse` reads; synthesize calls it before parsing a batch one by one."""
        fresh = list(dict.fromkeys(p.strip() for p in proposals if p.strip() not in self._parsed))
        for text, parsed in zip(fresh, self._admit(fresh), strict=True):
            self._parsed[text] = parsed

    def _admit(self, texts: list[str]) -> list[Problem | Rejected]:
        checked = [_check_proposal(t) for t in texts]
        runnable = [c for c in checked if not isinstance(c, Rejected)]
        runs = iter(self.pool.run_twice([Job(program, tuple(f"({_args_text(a)},)" for a in args))
                                         for _, program, args, _ in runnable]))
        out: list[Problem | Rejected] = []
        for item in checked:
            if isinstance(item, Rejected):
                out.append(item)
                continue
            mode, program, args, level = item
            first, second = next(runs)
            out.append(_problem(mode, program, args, level, first, second))
        return out

    # ---- the generator and the held-out set ------------------------------------------------

    def generate(self, rng: random.Random, level: int) -> Problem:
        return self._generate(rng, level, rng.choices(self.modes, self.weights)[0])

    def _generate(self, rng: random.Random, level: int, mode: str) -> Problem:
        for _ in range(100):
            program, kind = draw_program(rng, level)
            count = rng.randint(4, 6) if mode == "induction" else 1
            calls = SEPARATOR.join(f"f({canonical(draw_input(rng, kind))})" for _ in range(count))
            problem = self.parse(f"{mode}: {program}{SEPARATOR}{calls}")
            if isinstance(problem, Problem):
                if problem.level != level:
                    msg = (f"python_io generator wrote a level-{problem.level} program for level "
                           f"{level}: {program!r} (a bug in domains/programs.py's templates)")
                    raise RuntimeError(msg)
                return problem
        msg = f"python_io generator found no admissible level-{level} program in 100 draws"
        raise RuntimeError(msg)

    def heldout(self, per_level: int) -> list[Problem]:
        """`per_level` problems of each level in each of the run's modes (weight > 0), from fixed
        seeds, one per mode: the deduction items are those of a deduction-only run."""
        items, seen = [], set()
        for mode in self.modes:
            rng = random.Random(f"{self.name}-heldout-v1" if mode == "deduction"
                                else f"{self.name}-heldout-{mode}-v1")
            for level in self.levels:
                count = 0
                while count < per_level:
                    problem = self._generate(rng, level, mode)
                    if problem.text not in seen:
                        seen.add(problem.text)
                        items.append(problem)
                        count += 1
        return items

    def task_of(self, text: str) -> str | None:
        """A problem's mode: evaluate reports held-out accuracy per mode and per mode and level
        (`accuracy_task_<mode>`, `accuracy_task_<mode>_level_<N>`)."""
        mode = text.split(": ", 1)[0]
        return mode if mode in MODES else None

    # ---- answers ---------------------------------------------------------------------------

    def extract(self, completion: str) -> str | None:
        """The completion, stripped (an induction answer is a whole function); deduction and
        abduction answers are read from its first line."""
        return completion.strip() or None

    def training_target(self, reference: str) -> str:
        """The solver completion that a problem's reference teaches: deduction's output,
        abduction's input as its prompt continues it (`7)` after `f(`), induction's program.
        Abduction and induction references are the JSON that `score` runs, not answers, so a
        stage that trains on references (the warm-up, too-hard problems) must train on this."""
        if not reference.startswith('{"mode"'):
            return reference
        spec = json.loads(reference)
        return spec["input"] + ")" if spec["mode"] == "abduction" else spec["program"]

    def verifier(self) -> str:
        return "python_io/literal+sandbox@1"

    def judge(self, completions: list[str], problems: list[ProblemRow]) -> list[Judgement]:
        """A verdict per completion, with the sandbox outcome where the answer ran: deduction
        answers (and majority labels) are compared as canonical literals; abduction and
        induction answers are run against the reference's program or hidden calls (one sandbox
        batch). An empty answer is wrong (0); no reference is None ("none")."""
        out: list[Judgement | None] = []
        jobs, pending = [], []
        for index, (completion, problem) in enumerate(zip(completions, problems, strict=True)):
            answer, reference = self.extract(completion), problem["reference"]
            if reference is None:
                out.append(Judgement(None, "none"))
            elif answer is None:
                out.append(Judgement(0.0))
            elif not reference.startswith('{"mode"'):
                first = answer.split("\n", 1)[0]
                out.append(Judgement(float(canonical_answer(first) == canonical_answer(reference))))
            else:
                spec = json.loads(reference)
                job = _answer_job(spec, answer)
                out.append(Judgement(*job) if isinstance(job, tuple) else None)
                if not isinstance(job, tuple):
                    jobs.append(job)
                    pending.append((index, spec))
        for (index, spec), result in zip(pending, self.pool.run(jobs), strict=True):
            right = result.outcome == "ok" and list(result.outputs) == spec["outputs"]
            out[index] = Judgement(float(right), outcome=result.outcome)
        return [o for o in out if o is not None]


# ---- pure helpers ------------------------------------------------------------------------------

def _visible(count: int) -> int:
    return (count + 1) // 2


def _split(text: str) -> tuple[str, str, list[tuple[str, str]]]:
    """A stored problem text -> (mode, program, [(call, output), ...])."""
    mode, rest = text.split(": ", 1)
    program, *calls = rest.split(SEPARATOR)
    return mode, program, [tuple(c.split(" == ", 1)) for c in calls]


def _check_proposal(text: str) -> tuple[str, str, list[tuple], int] | Rejected:
    """Everything that needs no sandbox: format, size, static policy, literal calls, level."""
    if not text:
        return Rejected("empty")
    match = _PROPOSAL.match(text)
    if not match:
        return Rejected("malformed")
    mode, (program, *calls) = match.group(1), match.group(2).split(SEPARATOR)
    if len(program) > MAX_PROGRAM_CHARS:
        return Rejected("too_long")
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return Rejected("malformed")
    if function_of(tree) is None:
        return Rejected("malformed")
    if check_program(program, tree=tree) is not None:
        return Rejected("forbidden")
    wanted = (2, MAX_CALLS) if mode == "induction" else (1, 1)
    matches = [_CALL.match(c.strip()) for c in calls]
    args = [parse_call(m.group(1)) if m else None for m in matches]
    if not wanted[0] <= len(args) <= wanted[1] or any(a is None for a in args):
        return Rejected("malformed")
    return mode, program, args, level_of(tree)


def _problem(mode: str, program: str, args: list[tuple], level: int, first, second
             ) -> Problem | Rejected:
    """The admitted problem from two sandbox runs of its calls, or why it is not admitted."""
    for result in (first, second):
        if result.outcome != "ok":
            return Rejected(result.outcome)
    if first.outputs != second.outputs:
        return Rejected("nondeterministic")
    outputs = list(first.outputs)
    if any(len(o) > MAX_OUTPUT_CHARS for o in outputs):
        return Rejected("too_long")
    calls = [f"f({_args_text(a)})" for a in args]
    text = f"{mode}: {program}" + "".join(f"{SEPARATOR}{c} == {o}"
                                          for c, o in zip(calls, outputs, strict=True))
    if mode == "deduction":
        reference = outputs[0]
    elif mode == "abduction":
        reference = json.dumps({"mode": mode, "program": program, "outputs": outputs,
                                "input": _args_text(args[0])})
    else:
        hidden = _visible(len(calls))
        reference = json.dumps({"mode": mode, "calls": [f"({_args_text(a)},)"
                                                        for a in args[hidden:]],
                                "outputs": outputs[hidden:], "program": program})
    return Problem(text=text, reference=reference, level=level, task=mode,
                   payload={"mode": mode, "program": program})


def _answer_job(spec: dict, answer: str) -> Job | tuple[float, None, str | None]:
    """The sandbox job that checks a solver's answer, or its reward when none is needed."""
    if spec["mode"] == "abduction":
        args = parse_call("f(" + answer.split("\n", 1)[0].strip().removesuffix(")") + ")")
        if args is None:
            return (0.0, None, None)
        return Job(spec["program"], (f"({_args_text(args)},)",))
    try:
        tree = ast.parse(answer)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return (0.0, None, None)
    if function_of(tree) is None or len(answer) > MAX_PROGRAM_CHARS:
        return (0.0, None, None)
    if check_program(answer, tree=tree) is not None:
        return (0.0, None, "forbidden")
    return Job(answer, tuple(spec["calls"]))
