"""A resume with nothing to recompute (flows/run.py `resume_without_work`): a completed run
whose every stage is found done and intact finishes without a Prefect flow run or server; any
stage that would compute, or whose output is damaged or gate-failed, leaves the catalog as it
was and its lines unsaid, and the flows run as before."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from configs import load_config
from flows.run import RunSpec, resume_without_work
from storage.catalog import Catalog
from tests.conftest import SMALL_CONFIG
from tests.flows.runs import child_env

STAGE_ROWS = ("SELECT round, stage, fingerprint, status, finished_at FROM stages "
              "WHERE run_id = 'small' ORDER BY round, stage, fingerprint")
NO_SERVER = "http://127.0.0.1:9/api"  # nothing listens there


def _copy(small_run_root: Path, tmp_path: Path) -> tuple[Path, RunSpec]:
    root = tmp_path / "data"
    shutil.copytree(small_run_root, root, symlinks=True)
    return root, RunSpec(data_root=str(root), run_id="small", config=load_config(SMALL_CONFIG))


def _reused_lines(text: str) -> list[str]:
    return [line[line.index("round "):] for line in text.splitlines() if ": reused (" in line]


def test_a_completed_run_resumes_without_a_prefect_server(small_run_root, tmp_path):
    """PREFECT_API_URL names a port nothing listens on: the resume needs no server, says each
    stage's line once, prints the summary, and records nothing but the run's row."""
    root, _ = _copy(small_run_root, tmp_path)
    before = Catalog(root).query(STAGE_ROWS)
    resumed = subprocess.run(
        [sys.executable, "-m", "flows.cli", "resume", "small", "--data-root", str(root)],
        env=child_env(tmp_path, NO_SERVER), capture_output=True, text=True, timeout=300,
        check=False)
    assert resumed.returncode == 0, resumed.stderr
    lines = _reused_lines(resumed.stderr)
    assert len(lines) == len(before) == len(set(lines)), resumed.stderr
    assert ": started (" not in resumed.stderr
    assert "run small finished" in resumed.stdout
    assert Catalog(root).query(STAGE_ROWS) == before
    assert Catalog(root).run_status("small") == "completed"
    assert _reused_lines((root / "logs" / "small.log").read_text()) == lines


def test_a_resume_with_work_says_each_stage_once(small_run_root, tmp_path, prefect_server):
    """A margin no decision of the run turns on (its accuracies differ by 1/200 or more)
    changes the promote stages' fingerprints only: they run as flows on the server, the rest is
    reused, and no line of the check that found the work is said twice."""
    root, _ = _copy(small_run_root, tmp_path)
    resumed = subprocess.run(
        [sys.executable, "-m", "flows.cli", "resume", "small", "--data-root", str(root),
         "--set", "promote.margin=0.0001"],
        env=child_env(tmp_path, prefect_server), capture_output=True, text=True, timeout=300,
        check=False)
    assert resumed.returncode == 0, resumed.stderr
    started = [line for line in resumed.stderr.splitlines() if ": started (" in line]
    assert [line[line.index("round "):line.index(":", line.index("round "))]
            for line in started] == ["round 0 promote", "round 1 promote"], resumed.stderr
    lines = _reused_lines(resumed.stderr)
    assert len(lines) == len(set(lines)) == len(Catalog(small_run_root).query(STAGE_ROWS)) - 2


def _damage(root: Path) -> None:
    catalog = Catalog(root)
    curated = catalog.query("SELECT path FROM datasets WHERE run_id = 'small' AND round = 1"
                            " AND kind = 'train_rows'")
    path = Path(catalog.resolve(curated[0]["path"]))
    path.chmod(0o644)  # recorded files are read-only
    path.write_bytes(b"not parquet")


def _gate_failed(root: Path) -> None:
    with Catalog(root).connect() as con:
        con.execute("UPDATE stages SET status = 'gate_failed' WHERE run_id = 'small' AND "
                    "round = 1 AND stage = 'evaluate'")


def _interrupted(root: Path) -> None:
    Catalog(root).set_run_status("small", "interrupted")


def _more_rounds(spec: RunSpec) -> RunSpec:
    return spec.model_copy(update={"config": spec.config.model_copy(update={"rounds": 2})})


@pytest.mark.parametrize("change", [_damage, _gate_failed, _interrupted, _more_rounds])
def test_a_resume_with_anything_to_do_is_left_to_the_flows(small_run_root, tmp_path, caplog,
                                                           change):
    """A damaged output, a gate-failed stage, a run that is not `completed`, a round more: the
    check says no, writes nothing (the damaged file is not discarded yet, the stage rows and the
    run's status are as they were) and lets no line through."""
    root, spec = _copy(small_run_root, tmp_path)
    if change is _more_rounds:
        spec = change(spec)
    else:
        change(root)
    catalog = Catalog(root)
    stages, status = catalog.query(STAGE_ROWS), catalog.run_status("small")
    files = sorted((p, p.stat().st_size) for p in (root / "runs").rglob("*") if p.is_file())
    with caplog.at_level(logging.INFO, logger="flywheel"):
        assert resume_without_work(spec) is False
    assert catalog.query(STAGE_ROWS) == stages
    assert catalog.run_status("small") == status
    assert sorted((p, p.stat().st_size) for p in (root / "runs").rglob("*") if p.is_file()) \
        == files
    assert not [r for r in caplog.records if r.name.startswith("flywheel")]


def test_the_check_on_a_completed_run_says_what_a_flow_run_would(small_run_root, tmp_path,
                                                                   caplog):
    root, spec = _copy(small_run_root, tmp_path)
    with caplog.at_level(logging.INFO, logger="flywheel"):
        assert resume_without_work(spec) is True
    said = _reused_lines("\n".join(r.getMessage() for r in caplog.records))
    assert len(said) == len(Catalog(root).query(STAGE_ROWS))
    assert said[0].startswith("round 0 base: reused")
