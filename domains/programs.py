"""Small Python programs for the python_io domain: their difficulty level and a generator.

Programs are one line (the tiny model's tokenizer has no newline), one function `f`:

    def f(x): return x*3+1                              level 1  arithmetic only
    def f(x): return x*2 if x>4 else x+7                level 2  comparisons, if-expressions, calls
    def f(s): return s[::-1]+s[0]                       level 3  sequences, subscripts, methods
    def f(x): return [i%3 for i in x]                   level 4  comprehensions, loops
    def f(x): g=lambda y: y*2+1; return [g(i) for i in x]   level 5  statements, lambdas

The level is computed from the program, never taken from the request: the highest construct it
uses, one more when it is long (more than `LONG_PROGRAM_NODES` AST nodes).
"""

from __future__ import annotations

import ast
import random
import string

LEVELS = (1, 2, 3, 4, 5)
LONG_PROGRAM_NODES = 60

_LEVEL_5 = (ast.Lambda, ast.FunctionDef, ast.While, ast.For, ast.Try, ast.With)
_LEVEL_4 = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LEVEL_3 = (ast.Subscript, ast.Slice, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Attribute)
_LEVEL_2 = (ast.IfExp, ast.Compare, ast.BoolOp, ast.Call)


def function_of(tree: ast.Module) -> ast.FunctionDef | None:
    """The program's function `f` (the last top-level statement), or None."""
    last = tree.body[-1] if tree.body else None
    return last if isinstance(last, ast.FunctionDef) and last.name == "f" else None


def level_of(tree: ast.Module) -> int:
    """Difficulty 1..5 from the constructs of the program's function and its size."""
    function = function_of(tree)
    if function is None:
        msg = "level_of needs a program whose last statement defines f"
        raise ValueError(msg)
    nodes = list(ast.walk(function))
    level = 5 if len(function.body) > 1 else 1
    for node in nodes[1:]:
        if isinstance(node, _LEVEL_5):
            level = 5
        elif isinstance(node, _LEVEL_4):
            level = max(level, 4)
        elif isinstance(node, _LEVEL_3) or (isinstance(node, ast.Constant)
                                            and isinstance(node.value, str)):
            level = max(level, 3)
        elif isinstance(node, _LEVEL_2):
            level = max(level, 2)
    return min(5, level + 1) if len(nodes) > LONG_PROGRAM_NODES else level


# ---- the generator: templates per level, constants and inputs drawn from the rng -------------

def _small(rng: random.Random) -> int:
    return rng.randint(2, 9)


def _ints(rng: random.Random) -> list[int]:
    return [rng.randint(0, 9) for _ in range(rng.randint(3, 5))]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase[:8]) for _ in range(rng.randint(3, 5)))


# Each template: (program with {a} {b} {c} slots, input kind).
TEMPLATES: dict[int, list[tuple[str, str]]] = {
    1: [("def f(x): return x*{a}+{b}", "int"), ("def f(x): return x*x-{a}", "int"),
        ("def f(x): return (x+{a})*{b}", "int"), ("def f(x): return x//{a}+x%{b}", "int")],
    2: [("def f(x): return x*{a} if x>{b} else x+{c}", "int"),
        ("def f(x): return max(x,{a})-min(x,{b})", "int"),
        ("def f(x): return abs(x-{a})*{b}", "int"), ("def f(x): return x%{a}=={b}%{a}", "int")],
    3: [("def f(s): return s[::-1]", "word"), ("def f(x): return sorted(x)[{i}]", "ints"),
        ("def f(x): return x[{i}]+x[-1]*{a}", "ints"), ("def f(s): return s.upper()[:{i}]", "word"),
        ("def f(x): return len(x)*{a}+x[0]", "ints")],
    4: [("def f(x): return sum(i*{a} for i in range(x))", "int"),
        ("def f(x): return [i%{a} for i in x]", "ints"),
        ("def f(s): return ''.join(c*{b} for c in s)", "word"),
        ("def f(x): return [i for i in x if i>{a}]", "ints")],
    5: [("def f(x): g=lambda y: y*{a}+{b}; return [g(i) for i in x]", "ints"),
        ("def f(x): t=sorted(x); return t[0]*{a}+t[-1]", "ints"),
        ("def f(x): y=x*{a}; return y if y>{b}*{c} else -y", "int"),
        ("def f(s): n=len(s); return s[n//2:]+s[:n//2]", "word")],
}


def draw_input(rng: random.Random, kind: str) -> object:
    """One argument of the given kind: a small int, a list of digits, or a short word."""
    if kind == "int":
        return rng.randint(0, 12)
    return _ints(rng) if kind == "ints" else _word(rng)


def draw_program(rng: random.Random, level: int) -> tuple[str, str]:
    """(program text, input kind) of a template of `level` with its constants drawn."""
    template, kind = rng.choice(TEMPLATES[level])
    program = template.format(a=_small(rng), b=_small(rng), c=_small(rng), i=rng.randint(0, 2))
    return program, kind
