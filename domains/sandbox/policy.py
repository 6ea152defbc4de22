"""The static check a program passes before it runs: pure functions only.

This is the first, cheap line; the sandbox (worker.py) is the boundary. A program may import only
`ALLOWED_MODULES`, may not name the builtins that reach outside a pure function (files, `eval`,
`exec`, `__import__`, attribute reflection) and may not touch dunder attributes or names
(`().__class__.__subclasses__()`, `f.__globals__`, `__builtins__`), the usual ways out of a
restricted namespace. A refused program is `forbidden` without being run.

    check_program("def f(x): return x*3+1")          # None: admitted
    check_program("import os\\ndef f(x): return 1")   # "imports os"
"""

from __future__ import annotations

import ast

from domains.sandbox.worker import ALLOWED_MODULES

FORBIDDEN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "__import__", "input", "breakpoint", "globals", "locals",
    "vars", "getattr", "setattr", "delattr", "memoryview", "help", "exit", "quit", "dir"})


def check_program(source: str, *, tree: ast.AST | None = None) -> str | None:
    """Why `source` may not run (a short phrase), or None when it passes the static check.

    Parameters
    ----------
    source
        The program text.
    tree
        Its parsed AST, when the caller has it already.

    Returns
    -------
    None, or the first reason found: "does not parse", "imports X", "uses X", "touches X".
    """
    if tree is None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return "does not parse"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or "."])
            for name in names:
                if node.__dict__.get("level") or name.split(".")[0] not in ALLOWED_MODULES:
                    return f"imports {name}"
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or _dunder(node.id)):
            return f"uses {node.id}"
        elif isinstance(node, ast.Attribute) and _dunder(node.attr):
            return f"touches {node.attr}"
        elif isinstance(node, ast.Global | ast.Nonlocal | ast.ClassDef | ast.AsyncFunctionDef
                        | ast.Await | ast.Yield | ast.YieldFrom):
            return f"uses {type(node).__name__.lower()}"
    return None


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")
