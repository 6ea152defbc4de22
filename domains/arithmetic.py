"""Integer arithmetic: the proposer writes expressions, the executor evaluates them safely.

    proposer  "<propose>L2:"  ->  "37+5"
    solver    "<solve>37+5="  ->  "42"

Difficulty levels are computed from the expression itself, never taken from the request:

    1  one-digit sum or difference                      3+4, 3-9
    2  one-digit product; two digits +/- one digit      7*8, 37+5, 91-6
    3  two digits +/- two digits                        91-46, 58+67
    4  two digits x one digit; three digits +/- any     23*4, 512-87
    5  two-digit product, or two operations             34*27, 12+7*3

References come from a small AST evaluator that admits only integer literals and + - *,
never `eval`.
"""

from __future__ import annotations

import ast
import random
import re

from domains.base import SOLVE_TAG, Domain, Problem, ProblemRow, Rejected
from domains.checking import Judgement

_EXPRESSION = re.compile(r"^(0|[1-9]\d{0,2})([+\-*](0|[1-9]\d{0,2})){1,2}$")
_ANSWER = re.compile(r"^\s*(-?\d+)")
# the three verdicts there are (Judgement is frozen: shared by every row that gets one)
_RIGHT, _WRONG, _UNREFERENCED = Judgement(1.0), Judgement(0.0), Judgement(None, "none")
_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
              ast.Mult: lambda a, b: a * b}


class UnsafeExpression(ValueError):
    pass


def evaluate(expression: str) -> int:
    """Evaluate an integer expression of literals and + - * without `eval`."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        raise UnsafeExpression(f"not allowed in an expression: {ast.dump(node)[:60]}")

    return walk(ast.parse(expression, mode="eval"))


def level_of(expression: str) -> int:
    operands = re.split(r"[+\-*]", expression)
    operators = re.findall(r"[+\-*]", expression)
    digits = sorted(len(o) for o in operands)
    if len(operators) >= 2:
        return 5
    small, large = digits
    if operators[0] == "*":
        return {1: 2, 2: 4}.get(large, 5) if small == 1 else 5
    if large == 1:
        return 1
    if large == 2:
        return 2 if small == 1 else 3
    return 4


class ArithmeticDomain(Domain):
    """Shapes are the base class's: every digit as 0 (`512-87` and `734-21` share `000-00`)."""

    name = "arithmetic"
    levels = (1, 2, 3, 4, 5)

    def parse(self, proposal: str) -> Problem | Rejected:
        text = proposal.strip()
        if not text:
            return Rejected("empty")
        if not _EXPRESSION.match(text):
            return Rejected("malformed")
        return Problem(text=text, reference=str(evaluate(text)), level=level_of(text))

    def generate(self, rng: random.Random, level: int) -> Problem:
        def number(digits: int) -> int:
            return (rng.randint(0, 9) if digits == 1
                    else rng.randint(10 ** (digits - 1), 10**digits - 1))

        def pair(a: int, b: int, op: str) -> str:
            return f"{a}{op}{b}" if rng.random() < 0.5 else f"{b}{op}{a}"

        if level == 1:
            text = f"{number(1)}{rng.choice('+-')}{number(1)}"
        elif level == 2:
            text = (f"{number(1)}*{number(1)}" if rng.random() < 0.3
                    else pair(number(2), number(1), rng.choice("+-")))
        elif level == 3:
            text = f"{number(2)}{rng.choice('+-')}{number(2)}"
        elif level == 4:
            if rng.random() < 0.5:
                text = pair(number(2), number(1), "*")
            else:
                text = pair(number(3), number(rng.randint(1, 3)), rng.choice("+-"))
        else:
            if rng.random() < 0.4:
                text = f"{number(2)}*{number(2)}"
            else:
                text = (f"{number(rng.randint(1, 2))}{rng.choice('+-*')}"
                        f"{number(rng.randint(1, 2))}{rng.choice('+-*')}{number(1)}")
        problem = self.parse(text)
        if not isinstance(problem, Problem) or problem.level != level:
            msg = (f"arithmetic generator wrote {text!r} for level {level}, which parses as "
                   f"{problem!r}: the generator and the parser's levels disagree (a bug in "
                   "domains/arithmetic.py)")
            raise RuntimeError(msg)
        return problem

    def solver_prompt(self, problem_text: str) -> str:
        return f"{SOLVE_TAG}{problem_text}="

    def extract(self, completion: str) -> str | None:
        match = _ANSWER.match(completion)
        return str(int(match.group(1))) if match else None

    def verifier(self) -> str:
        return "arithmetic/integer@1"

    def judge(self, completions: list[str], problems: list[ProblemRow]) -> list[Judgement]:
        """1 when the leading integer is the reference, else 0 (no integer is a wrong answer);
        None ("none") where there is no reference."""
        return [_UNREFERENCED if problem["reference"] is None
                else _RIGHT if answer == problem["reference"] else _WRONG
                for answer, problem in zip(self.answers(completions), problems, strict=True)]

    def heldout(self, per_level: int) -> list[Problem]:
        rng = random.Random(f"{self.name}-heldout-v1")
        items: list[Problem] = []
        seen: set[str] = set()
        for level in self.levels:
            count = 0
            while count < per_level:
                problem = self.generate(rng, level)
                if problem.text not in seen:
                    seen.add(problem.text)
                    items.append(problem)
                    count += 1
        return items
