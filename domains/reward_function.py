"""The user's own reward function, TRL's way (`verify.reward_function = "module:function"`).

The function is called as TRL calls a GRPO reward function: the completions, and the dataset's
columns as keyword arguments, one value per completion. Here the dataset is the problems
dataset, so the keywords are the problem row's columns plus the solver prompts:

    def brevity(completions, text, reference, **kwargs):   # my_rewards.py, next to the config
        return [None if ref is None else float(len(c) < 80) for c, ref in zip(completions,
                                                                             reference)]

    reward(completions=["5", ...], prompts=["<solve>2+3=", ...], text=["2+3", ...],
           reference=["5", ...], level=[1, ...], task=[None, ...], payload=[None, ...])
    -> [1.0, ...]

It returns a list of one float in [0, 1] or None per completion: None (or NaN) is
`Judgement(None, "reward_none")`, never 0. A list of another length, or a reward outside
[0, 1], is a ValueError naming the key (the verdicts and the pass rates read rewards in
[0, 1]: rescale in the function). It is judged through `Domain.judge` (domains/judge.py
`JudgedDomain`), so verify, GRPO and evaluate all use it. The module is imported with the
working directory on `sys.path`; an unusable spec is a DomainInputError, so the CLI refuses
the run before it starts (exit 2). The verifier id holds a hash of the function's source file,
so verdicts say which version judged them.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from domains.base import Domain, DomainInputError, ProblemRow
from domains.checking import Judgement

KEY = "verify.reward_function"
COLUMNS = ("text", "reference", "level", "task", "payload")  # the problem row's, as keywords


def load_reward_function(spec: str) -> Callable[..., Any]:
    """The function `spec` ("module:function") names, imported with the working directory on
    `sys.path`; a DomainInputError of one line naming the key and the fix otherwise."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        msg = f"{KEY} = {spec!r}: write it as 'module:function', e.g. 'my_rewards:brevity'"
        raise DomainInputError(msg)
    cwd = os.getcwd()
    if cwd not in sys.path:  # the user's module next to where the run starts
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's code: any error importing it is theirs to fix
        first = str(exc).splitlines()[0] if str(exc) else ""
        msg = (f"{KEY} = {spec!r}: importing {module_name!r} failed ({type(exc).__name__}: "
               f"{first}); put {module_name}.py in the working directory {cwd} or on PYTHONPATH")
        raise DomainInputError(msg) from None
    function = getattr(module, name, None)
    if not callable(function):
        msg = f"{KEY} = {spec!r}: module {module_name!r} has no function {name!r}"
        raise DomainInputError(msg)
    return function


class RewardFunction:
    """`verify.reward_function` as a verifier (`domains.judge.JudgedDomain`'s scorer)."""

    def __init__(self, spec: str, function: Callable[..., Any] | None = None) -> None:
        self.spec = spec
        self.function = function or load_reward_function(spec)

    def __getstate__(self) -> dict[str, Any]:  # a Ray worker imports it again by name
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"])

    def describe(self) -> str:
        """`reward_function[<spec>#<hash of its source file>]@1`."""
        try:
            source = inspect.getsourcefile(self.function)
            with open(source, "rb") as handle:  # noqa: PTH123 - a path from inspect
                digest = "#" + hashlib.sha256(handle.read()).hexdigest()[:12]
        except (TypeError, OSError):  # a builtin or a function without a file
            digest = ""
        return f"reward_function[{self.spec}{digest}]@1"

    def judge(self, completions: list[str], problems: list[ProblemRow],
              domain: Domain) -> list[Judgement]:
        columns = {name: [p.get(name) for p in problems] for name in COLUMNS}
        prompts = [domain.solver_prompt(p["text"]) for p in problems]
        rewards = self.function(completions=list(completions), prompts=prompts, **columns)
        if not isinstance(rewards, list | tuple) or len(rewards) != len(completions):
            got = f"{len(rewards)} values" if isinstance(rewards, list | tuple) else repr(rewards)
            msg = (f"{KEY} = {self.spec!r} returned {got} for {len(completions)} completions: "
                   "return a list of one float or None per completion")
            raise ValueError(msg)
        return [self._judgement(index, value) for index, value in enumerate(rewards)]

    def _judgement(self, index: int, value: Any) -> Judgement:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return Judgement(None, "reward_none")
        if isinstance(value, bool) or not isinstance(value, int | float):
            msg = (f"{KEY} = {self.spec!r} returned {value!r} for completion {index}: "
                   "return a float in [0, 1] or None")
            raise ValueError(msg)
        if not 0.0 <= value <= 1.0:
            msg = (f"{KEY} = {self.spec!r} returned {value!r} for completion {index}: rewards "
                   "must be in [0, 1] (or None); rescale in the function")
            raise ValueError(msg)
        return Judgement(float(value))
