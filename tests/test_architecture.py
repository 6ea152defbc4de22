"""The layout's rules, checked on the source: top-level packages are this repository's own, the
module import graph is acyclic, `storage` imports nothing of the other packages, SQL lives only
in `storage/`, and no library function is longer than 60 lines (its docstring not counted).

Imports are read with `ast`, function-local ones included, so a cycle hidden inside a function
counts as much as one at the top of a module."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("configs", "domains", "flows", "models", "schedules", "storage", "tasks", "validators")
MAX_FUNCTION_LINES = 60
# A statement keyword followed by the words that make it SQL, inside one string literal.
SQL = re.compile(
    r"\b(SELECT\b[\s\S]*\bFROM|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\w+\s+SET|CREATE\s+"
    r"(OR\s+REPLACE\s+)?(TABLE|VIEW)|DROP\s+(TABLE|VIEW)|ALTER\s+TABLE)\b")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Project modules that `name` imports anywhere in its file (resolved to known modules)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {t for t in targets if t in MODULES and t != name}


def _graph() -> dict[str, set[str]]:
    return {name: _imports(name, path) for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as a list of modules, or None when it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_top_level_packages_are_this_repository(package):
    module = importlib.import_module(package)
    assert Path(module.__file__).resolve().is_relative_to(ROOT), (
        f"`import {package}` found {module.__file__}, not this repository's package")


def test_no_flywheel_package_folder():
    assert not (ROOT / "flywheel").exists()


def test_module_import_graph_is_acyclic():
    assert _cycle(_graph()) is None, f"import cycle: {' -> '.join(_cycle(_graph()))}"


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_storage_imports_nothing_of_the_other_packages():
    outside = {f"{name} -> {target}" for name, targets in _graph().items()
               if name.split(".")[0] == "storage" for target in targets
               if target.split(".")[0] != "storage"}
    assert not outside


def test_dependencies_point_one_way():
    """flows -> tasks -> (domains, models, storage, validators); configs sits below them all."""
    rank = {"storage": 0, "configs": 1, "domains": 2, "models": 2, "validators": 2, "tasks": 3,
            "schedules": 4, "flows": 5}
    upward = {f"{name} -> {target}" for name, targets in _graph().items() for target in targets
              if rank[target.split(".")[0]] > rank[name.split(".")[0]]}
    assert not upward


def _strings(tree: ast.AST, skip: set[int]):
    """(line, text) of every string literal of `tree` but the nodes in `skip`."""
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):  # an f-string: its literal parts joined
            text = "".join(v.value for v in node.values
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
            yield node.lineno, text


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_no_sql_outside_storage():
    found = []
    for name, path in MODULES.items():
        if name.split(".")[0] == "storage":
            continue
        tree = ast.parse(path.read_text())
        docstrings = _docstring_nodes(tree)
        found += [f"{path.relative_to(ROOT)}:{lineno}"
                  for lineno, text in _strings(tree, docstrings) if SQL.search(text)]
    assert not sorted(set(found))


def test_sql_pattern_matches_sql_and_not_prose():
    assert SQL.search("SELECT count(*) FROM rollouts WHERE round = ?")
    assert SQL.search("CREATE OR REPLACE VIEW problems AS SELECT * FROM read_parquet(?)")
    assert not SQL.search("select the problems from the band")


def _docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        return first.end_lineno - first.lineno + 1
    return 0


def test_no_library_function_over_60_lines():
    """Lines of code from `def` to the end, the docstring not counted."""
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1 - _docstring_lines(node)
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert not long


# Functions of tasks/ that may see the run config: the RunContext itself (its stage seeds), the
# gate runner (gates are read by it, not by a stage), the settings builders and the pure
# fingerprint chain of tasks/fingerprints.py. The @task wrappers may too.
CONFIG_READERS = {("tasks.context", "stage_seed"), ("tasks.context", "__post_init__"),
                  ("tasks.gates", "gate_outputs"), ("tasks.train", "train_settings"),
                  ("tasks.fingerprints", "stage_fingerprints"),
                  ("tasks.fingerprints", "stage_graph")}


def _is_task(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Name) and target.id == "task":
            return True
    return False


def _run_config_uses(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Where `node` (its nested functions included) takes a RunConfig or reads `.config.`."""
    found = []
    for inner in ast.walk(node):
        if isinstance(inner, ast.arg) and inner.annotation is not None \
                and "RunConfig" in ast.unparse(inner.annotation):
            found.append(f"parameter {inner.arg}: RunConfig")
        if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Attribute) \
                and inner.value.attr == "config":
            found.append(ast.unparse(inner))
    return found


def test_stage_computations_never_see_the_run_config():
    """Nothing in tasks/ but the @task wrappers and the settings builders takes a `RunConfig`
    or reads `<context>.config.`: a stage's computation gets its settings object
    (configs/settings.py), so its fingerprint covers everything it reads."""
    found = []
    for name, path in MODULES.items():
        if not name.startswith("tasks"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or _is_task(node) \
                    or (name, node.name) in CONFIG_READERS:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {use}"
                      for use in _run_config_uses(node)]
    assert not found


def test_run_config_finder_finds_both_uses():
    tree = ast.parse("def f(ctx, config: RunConfig):\n    return ctx.config.rollout\n")
    assert len(_run_config_uses(tree.body[0])) == 2


def test_no_merge_conflict_markers_in_the_repository():
    """A merge left unresolved reads as text: no tracked file holds its markers."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)
    found = [name for name in tracked if name.endswith((".py", ".md", ".toml", ".txt", ".cfg"))
             and marker.search((ROOT / name).read_text(errors="replace"))]
    assert not found, f"merge conflict markers in {found}"
