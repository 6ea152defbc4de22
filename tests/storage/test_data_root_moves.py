"""A data root can be copied (`cp -a`) or moved (`mv`): the catalog records paths relative to
the data root, so the copy names its own files, never the original's.

One real run (warm-up only) is made once; each test works on a copy or a move of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from storage.catalog import Catalog

RUN_ID = "movable"
CONFIG = """
rounds = 0
[domain]
seed_problems = 200
min_level = 1
max_level = 2
heldout_per_level = 5
[rollout]
samples_per_problem = 2
[train]
batch_size = 16
[train.warmup]
max_steps = 20
"""


def _flywheel(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


def _files(root: Path) -> dict[str, str]:
    """Every file of the run folder with its sha256 (the lock file aside)."""
    run_dir = root / "runs" / RUN_ID
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != "run.lock"}


@pytest.fixture(scope="module")
def original(tmp_path_factory, prefect_server):
    tmp = tmp_path_factory.mktemp("moves")
    (tmp / "run.toml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(OMP_NUM_THREADS="1", PREFECT_API_URL=prefect_server,
               PREFECT_HOME=str(tmp / "prefect-home"))
    root = tmp / "original"
    done = _flywheel("run", "--config", str(tmp / "run.toml"), "--run-id", RUN_ID,
                     "--data-root", str(root), env=env, cwd=tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"tmp": tmp, "root": root, "env": env}


def _views(root: Path, env: dict[str, str], cwd: Path) -> dict[str, str]:
    """What a user reads of a run, with the data root's own path written as ROOT."""
    out = {}
    for name, args in {"status": ["status", RUN_ID, "--json"],
                       "funnel": ["audit", RUN_ID, "funnel"],
                       "validate": ["validate", RUN_ID]}.items():
        done = _flywheel(*args, "--data-root", str(root), env=env, cwd=cwd)
        assert done.returncode == 0, (name, done.stdout + done.stderr)
        text = done.stdout.replace(str(root.resolve()), "ROOT")
        out[name] = re.sub(r", [0-9.]+ s$", "", text, flags=re.MULTILINE)  # gate timings
    status = json.loads(out["status"])
    for stage in status["stages"]:  # timings are the catalog's, equal in a copy
        stage.pop("started_at", None)
    out["status"] = json.dumps(status, sort_keys=True)
    report = _flywheel("report", RUN_ID, "--out", str(cwd / f"report-{root.name}"),
                       "--data-root", str(root), env=env, cwd=cwd)
    assert report.returncode == 0, report.stdout + report.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize("how", ["copy", "move"])
def test_a_copied_or_moved_root_reads_and_resumes_as_its_own(original, how):
    tmp, env = original["tmp"], original["env"]
    source = tmp / f"source-{how}"  # a private copy to move, so the original stays for others
    shutil.copytree(original["root"], source, symlinks=True)
    before = _views(source, env, tmp)
    target = tmp / f"{how}-target"
    if how == "copy":
        subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    else:
        subprocess.run(["mv", str(source), str(target)], check=True)
    assert _views(target, env, tmp) == before
    files = _files(target)
    resumed = _flywheel("resume", RUN_ID, "--data-root", str(target), env=env, cwd=tmp)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "discarded" not in resumed.stdout + resumed.stderr
    assert "removed" not in resumed.stdout + resumed.stderr
    assert _files(target) == files, "resume in the copy recomputed or deleted files"
    if how == "copy":
        assert _files(source) == files, "the original changed"


@pytest.mark.slow
def test_validate_in_a_copy_checks_the_copys_files(original):
    tmp, env = original["tmp"], original["env"]
    copy = tmp / "truncated-copy"
    subprocess.run(["cp", "-a", str(original["root"]), str(copy)], check=True)
    victim = next((copy / "runs" / RUN_ID).rglob("rollouts-*.parquet"))
    victim.write_bytes(victim.read_bytes()[:-100])
    done = _flywheel("validate", RUN_ID, "--data-root", str(copy), env=env, cwd=tmp)
    assert done.returncode != 0
    assert victim.name in done.stdout + done.stderr
    assert _flywheel("validate", RUN_ID, "--data-root", str(original["root"]), env=env,
                     cwd=tmp).returncode == 0, "the original is intact"


@pytest.mark.slow
def test_a_lost_datasets_row_is_recomputed_not_skipped(original):
    tmp, env = original["tmp"], original["env"]
    copy = tmp / "lost-row"
    subprocess.run(["cp", "-a", str(original["root"]), str(copy)], check=True)
    reference = _files(copy)
    with duckdb.connect(str(copy / "catalog.duckdb")) as con:
        lost = con.execute("SELECT path FROM datasets WHERE kind = 'proposals'").fetchall()
        con.execute("DELETE FROM datasets WHERE kind = 'proposals'")
    assert len(lost) == 1
    resumed = _flywheel("resume", RUN_ID, "--data-root", str(copy), env=env, cwd=tmp)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "the catalog lists 1 of the stage's 2 outputs" in resumed.stdout + resumed.stderr
    assert _files(copy) == reference, "recomputed byte-identical, nothing lost"
    recorded = Catalog(copy).completed_datasets(RUN_ID, _synthesize_fingerprint(copy))
    assert set(recorded) == {"proposals", "problems"}


def _synthesize_fingerprint(root: Path) -> str:
    with duckdb.connect(str(root / "catalog.duckdb"), read_only=True) as con:
        return con.execute("SELECT fingerprint FROM stages WHERE stage = 'synthesize' AND round = 0"
                           " AND status = 'completed' ORDER BY finished_at DESC LIMIT 1"
                           ).fetchone()[0]
