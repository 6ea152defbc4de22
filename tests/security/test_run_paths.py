"""A run id never leaves the data root, and a run folder that is a link is the run's own.

Every command that takes a run id applies the one rule of storage/paths.py before it reads or
writes anything: a hostile id (`../x`, empty, a trailing newline, absolute, 300 characters,
`.`, `..`, `a/b`, non-ASCII) is one line on stderr naming it and the rule, exit 2, and not a
byte changes under the data root's parent. A run folder symlinked to another disk is followed:
a finished run moved there and linked back resumes with every stage reused, no output deleted,
rewritten or recomputed (the sweep of storage/recovery.py once compared the resolved folder
entries with unresolved recorded paths and discarded all of them as leftovers).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage.catalog import Catalog
from storage.datasets import dataset_path, write_atomic
from storage.paths import InvalidRunId, check_run_id, link_target, run_folder
from storage.recovery import recover_run

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "flows" / "small.toml"
RUN = "kept"

HOSTILE = ["../x", "../../x", "../../../x", "", "a\n", "ABSOLUTE", "x" * 300, ".", "..", "a/b",
           "rün", "a b", "a\\b", "x" * 101]


def _commands(run_id: str) -> list[list[str]]:
    return [
        ["run", "--run-id", run_id, "--config", str(SMALL)],
        ["resume", run_id, "--config", str(SMALL)],
        ["resume", run_id],
        ["status", run_id],
        ["status", run_id, "--json"],
        ["checkpoint", run_id],
        ["audit", run_id, "funnel"],
        ["report", run_id],
        ["validate", run_id],
        ["config", "show", run_id],
        ["config", "diff", run_id, RUN],
        ["schedule", "serve", "--run-id", run_id],
        ["schedule", "deploy", "--run-id", run_id],
    ]


def _tree(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry under `root`: its kind and, for a file, its sha256."""
    out = {}
    for p in sorted(root.rglob("*")):
        kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "file"
        out[str(p.relative_to(root))] = (kind, hashlib.sha256(p.read_bytes()).hexdigest()
                                         if kind == "file" else "")
    return out


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    """A data root three folders deep (so `../../../x` still lands inside tmp_path) with a
    catalog that records one completed run; the working directory is the data root."""
    root = tmp_path / "a" / "b" / "c" / "data"
    catalog = Catalog(root)
    catalog.ensure_run(RUN, "{}")
    rows = [{"problem_id": f"p{i}", "run_id": RUN, "round": 0, "text": f"{i}+1",
             "reference": str(i + 1), "level": 1, "source": "seed", "proposal_id": f"q{i}",
             "task": None, "payload": None} for i in range(3)]
    written = write_atomic("problems", rows, dataset_path(root, RUN, 0, "problems", "f" * 32))
    catalog.record_completed(run_id=RUN, round_index=0, stage="synthesize", fingerprint="f" * 32,
                             started_at=time.time(), outputs=[written], inputs={}, metrics={})
    catalog.set_run_status(RUN, "completed")
    monkeypatch.chdir(root)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return root


@pytest.mark.parametrize("hostile", HOSTILE, ids=repr)
def test_a_hostile_run_id_is_one_line_exit_2_and_writes_nothing(data_root, tmp_path, hostile):
    run_id = str(tmp_path / "abs") if hostile == "ABSOLUTE" else hostile
    before = _tree(tmp_path)
    for args in _commands(run_id):
        result = CliRunner().invoke(app, [*args, "--data-root", str(data_root)])
        stderr = result.stderr
        assert result.exit_code == 2, (args, result.output)
        assert len(stderr.strip().splitlines()) == 1, (args, stderr)
        assert "not a run id" in stderr and "letters, digits" in stderr, (args, stderr)
        assert repr(run_id)[:40] in stderr, (args, stderr)  # names the id (a long one cut)
        assert "Traceback" not in result.output
        assert _tree(tmp_path) == before, args


def test_empty_run_id_is_no_timestamped_run(data_root):
    result = CliRunner().invoke(app, ["run", "--run-id", "", "--config", str(SMALL),
                                      "--data-root", str(data_root)])
    assert result.exit_code == 2 and "--run-id ''" in result.stderr
    assert sorted(p.name for p in (data_root / "runs").iterdir()) == [RUN]


@pytest.mark.parametrize("good", ["a", "run-20250101-010203", "A.b_c-9", "x" * 100])
def test_the_rule_keeps_ordinary_ids(good):
    assert check_run_id(good) == good
    assert run_folder("/d", good) == Path("/d/runs") / good


@pytest.mark.parametrize("hostile", HOSTILE)
def test_the_storage_layer_refuses_what_the_cli_refuses(hostile):
    hostile = "/abs" if hostile == "ABSOLUTE" else hostile
    with pytest.raises(InvalidRunId, match="not a run id"):
        run_folder("/d", hostile)
    with pytest.raises(InvalidRunId):
        dataset_path(Path("/d"), hostile, 0, "problems", "f" * 32)


def test_a_linked_run_folder_keeps_its_recorded_outputs_in_the_sweep(data_root, tmp_path):
    """The cause of the data loss, without a model: resolved entries vs unresolved rows."""
    elsewhere = tmp_path / "disk2" / "runs"
    elsewhere.mkdir(parents=True)
    shutil.move(run_folder(data_root, RUN), elsewhere / RUN)
    os.symlink(elsewhere / RUN, run_folder(data_root, RUN))
    assert link_target(data_root, RUN) == (elsewhere / RUN).resolve()
    assert recover_run(Catalog(data_root), RUN) == []
    assert len(list((elsewhere / RUN / "round-000").glob("problems-*.parquet"))) == 1
    # a file written through the link is recorded by its name in the data root, not as
    # /.../disk2/runs/kept/... (which the path migration would map to a wrong run folder)
    named = run_folder(data_root, RUN) / "round-001" / "x.parquet"
    assert Catalog(data_root).relative(named) == f"runs/{RUN}/round-001/x.parquet"


# --- a real finished run, moved to another disk and linked back -------------------------------

def _flywheel(args: list[str], prefect_url: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "FLYWHEEL_TEST_"))}
    env.update(OMP_NUM_THREADS="1", PREFECT_API_URL=prefect_url,
               PREFECT_HOME=str(tmp / "prefect-home"))
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900, check=False)


def _files(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under `folder` (links followed): (inode, mtime_ns, sha256)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != "run.lock":
            st = p.stat()
            out[str(p.relative_to(folder))] = (st.st_ino, st.st_mtime_ns,
                                               hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module")
def linked_run(tmp_path_factory, prefect_server, small_run_root):
    """A copy of the session's finished run of small.toml (tests/conftest.py), its run folder
    moved to another disk and linked back, then resumed by the CLI."""
    tmp = tmp_path_factory.mktemp("linked")
    root = tmp / "data"
    shutil.copytree(small_run_root, root, symlinks=True)
    disk2 = tmp / "disk2" / "runs"
    disk2.mkdir(parents=True)
    shutil.move(root / "runs" / "small", disk2 / "small")
    os.symlink(disk2 / "small", root / "runs" / "small")
    before = _files(disk2 / "small")
    resumed = _flywheel(["resume", "small", "--data-root", str(root)], prefect_server, tmp)
    return {"root": root, "target": disk2 / "small", "before": before, "resumed": resumed}


@pytest.mark.slow
def test_resume_through_a_linked_run_folder_reuses_every_stage(linked_run):
    resumed = linked_run["resumed"]
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output
    assert "discarded" not in output and "recomputed" not in output, output
    assert f"is a link to {linked_run['target'].resolve()}" in output, output
    catalog = Catalog(linked_run["root"])
    stages = catalog.query("SELECT DISTINCT round, stage FROM stages WHERE run_id = 'small'")
    reused = [line for line in output.splitlines() if ": reused (fingerprint " in line]
    assert len(reused) == len(stages), output
    assert ": started (fingerprint " not in output, output  # nothing computed again


@pytest.mark.slow
def test_no_output_of_the_linked_run_was_deleted_or_rewritten(linked_run):
    after = _files(linked_run["target"])
    before = linked_run["before"]
    recorded = {k: v for k, v in before.items() if k.startswith("round-")}
    assert len([k for k in recorded if k.endswith(".parquet")]) >= 10, sorted(recorded)
    for name, stamp in recorded.items():
        assert after.get(name) == stamp, name  # same inode, mtime and bytes
    assert link_target(linked_run["root"], "small") == linked_run["target"].resolve()
