"""Half-written and damaged state: found, reported in one line naming the file, discarded,
recomputed. The stages here are fakes over the real `run_stage`, so each case takes milliseconds;
tests/flows/test_resume.py kills real runs."""

import logging

import pyarrow.parquet as pq
import pytest

from configs import RunConfig
from configs.settings import StageSettings
from storage.datasets import dataset_path, round_dir, write_atomic
from storage.recovery import check_recorded, guarded_run, recover_run
from tasks.context import RunContext
from tasks.stage import StageResult, run_stage


class Knob(StageSettings):
    """A stage's settings in these tests: one field."""

    k: int = 0

def _problem(i: int) -> dict:
    return {"problem_id": f"p{i}", "run_id": "r", "round": 0, "text": f"{i}+1",
            "reference": str(i + 1), "level": 1, "source": "seed", "proposal_id": f"q{i}"}


class Chain:
    """Three fake stages a -> b -> c over run_stage; counts how often each one computes."""

    def __init__(self, data_root):
        self.ctx = RunContext(data_root=data_root, run_id="r", config=RunConfig())
        self.calls = {"a": 0, "b": 0, "c": 0}

    def stage(self, name, config, inputs, rows=20):
        def compute(fingerprint):
            self.calls[name] += 1
            return StageResult(datasets={"problems": [_problem(i) for i in range(rows)]})

        return run_stage(self.ctx, stage=name, version=1, round_index=0, settings=config,
                         inputs=inputs, compute=compute)

    def run(self, b_config=None):
        a = self.stage("a", Knob(k=1), {})
        b = self.stage("b", b_config or Knob(k=1), {"a": a.fingerprint})
        c = self.stage("c", Knob(k=1), {"b": b.fingerprint})
        return a, b, c


@pytest.fixture
def chain(tmp_path):
    chain = Chain(tmp_path)
    chain.ctx.catalog.ensure_run("r", "{}")
    return chain


def _notices(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "flywheel.recovery"]


def _completed(catalog, stage):
    return catalog.query("SELECT status FROM stages WHERE run_id = 'r' AND stage = ?", [stage])


def test_rerun_skips_every_done_stage(chain):
    first = chain.run()
    again = chain.run()
    assert chain.calls == {"a": 1, "b": 1, "c": 1}
    assert [o.fingerprint for o in first] == [o.fingerprint for o in again]
    assert all(o.skipped for o in again)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "truncated"),
        (lambda p: p.unlink(), "missing"),
        (lambda p: pq.write_table(pq.read_table(p).slice(0, 5), p), "has 5 rows"),
        (lambda p: None, None),
    ],
    ids=["truncated", "deleted", "wrong-row-count", "untouched"],
)
def test_damaged_recorded_file_is_reported_discarded_and_recomputed(chain, caplog, damage, reason):
    _, b, _ = chain.run()
    path = b.path("problems")
    before = path.read_bytes()
    damage(path)
    with caplog.at_level(logging.WARNING, logger="flywheel.recovery"):
        _, b2, c2 = chain.run()
    if reason is None:  # control: an intact file is skipped, nothing reported
        assert chain.calls == {"a": 1, "b": 1, "c": 1} and not _notices(caplog)
        return
    # b is recomputed (same fingerprint, byte-identical file), and c that read it; a is not
    assert chain.calls == {"a": 1, "b": 2, "c": 2}
    assert b2.fingerprint == b.fingerprint and path.read_bytes() == before and not c2.skipped
    lines = _notices(caplog)
    assert len(lines) == 2 and str(path) in lines[0] and reason in lines[0], lines
    assert "round 0 c" in lines[1] and str(c2.path("problems")) in lines[1], lines
    for stage in ("b", "c"):
        statuses = sorted(r["status"] for r in _completed(chain.ctx.catalog, stage))
        assert statuses == ["completed", "discarded"]


def test_dependents_of_a_damaged_stage_are_recomputed_transitively(chain):
    """If the recomputed output differs (another machine), nothing that read the old one stays."""
    _, b, _ = chain.run()
    b.path("problems").unlink()
    versions = iter([5, 6])  # b's recompute now yields different rows: c must not be stale
    chain.stage = _with_rows(chain.stage, versions)
    *_, c2 = chain.run()
    assert chain.calls == {"a": 1, "b": 2, "c": 2} and not c2.skipped
    assert chain.ctx.catalog.completed_datasets("r", c2.fingerprint)["problems"]["rows"] == 6


def _with_rows(stage, versions):
    def patched(name, config, inputs, rows=20):
        return stage(name, config, inputs, rows=next(versions) if name in "bc" else rows)
    return patched


def test_checksum_mismatch_is_caught(chain):
    _, b, _ = chain.run()
    info = chain.ctx.catalog.completed_datasets("r", b.fingerprint)
    table = pq.read_table(b.path("problems"))
    pq.write_table(table.set_column(3, "text", table.column("reference")), b.path("problems"))
    path, reason = check_recorded(info)
    assert path == b.path("problems") and "changed since it was recorded" in reason


def test_file_without_catalog_row_and_temp_files_are_swept(chain, caplog):
    chain.run()
    folder = round_dir(chain.ctx.data_root, "r", 0)
    recorded = sorted(folder.glob("problems-*.parquet"))
    orphan = write_atomic("problems", [_problem(0)], dataset_path(folder.parents[2], "r", 0,
                                                                   "problems", "e" * 32)).path
    temp = folder / f".rollouts-{'d' * 12}.parquet.tmp-4242"
    temp.write_bytes(b"PAR1 half")
    unrecorded_checkpoint = folder / f"checkpoint-{'c' * 12}"
    unrecorded_checkpoint.mkdir()
    (unrecorded_checkpoint / "model.safetensors").write_bytes(b"x")
    base_scratch = folder / ".base-abc123"
    base_scratch.mkdir()
    resumable = folder / f".train-{'b' * 12}"
    resumable.mkdir()
    with caplog.at_level(logging.WARNING, logger="flywheel.recovery"):
        found = recover_run(chain.ctx.catalog, "r")
    assert {f.path for f in found} == {orphan, temp, unrecorded_checkpoint, base_scratch}
    lines = _notices(caplog)
    assert len(lines) == 4 and all(len(line.splitlines()) == 1 for line in lines)
    assert any(str(orphan) in line and "without a completed catalog row" in line for line in lines)
    assert any(str(temp) in line and "pid 4242" in line for line in lines)
    assert any(str(unrecorded_checkpoint) in line and "checkpoint folder" in line for line in lines)
    assert not orphan.exists() and not temp.exists() and not unrecorded_checkpoint.exists()
    assert resumable.exists(), "a training scratch folder is kept: training resumes from it"
    assert len(recorded) == 3 and all(p.exists() for p in recorded)


def test_catalog_row_missing_for_existing_file(chain, caplog):
    *_, c = chain.run()
    with chain.ctx.catalog.connect() as con:  # the crash came between rename and catalog row
        con.execute("DELETE FROM stages WHERE stage = 'c'")
        con.execute("DELETE FROM datasets WHERE stage = 'c'")
    before = c.path("problems").read_bytes()
    with caplog.at_level(logging.WARNING, logger="flywheel.recovery"):
        recover_run(chain.ctx.catalog, "r")
        _, _, c2 = chain.run()
    lines = _notices(caplog)
    assert len(lines) == 1 and str(c.path("problems")) in lines[0], lines
    assert chain.calls == {"a": 1, "b": 1, "c": 2} and not c2.skipped
    assert c2.path("problems").read_bytes() == before


def test_config_change_recomputes_downstream_not_upstream(chain):
    a, b, c = chain.run()
    a2, b2, c2 = chain.run(b_config=Knob(k=2))
    assert chain.calls == {"a": 1, "b": 2, "c": 2}
    assert a2.fingerprint == a.fingerprint and a2.skipped
    assert b2.fingerprint != b.fingerprint and c2.fingerprint != c.fingerprint
    assert b.path("problems").exists() and c.path("problems").exists()  # history is kept


def test_gate_failed_outputs_are_kept_for_audit(chain):
    _, b, _ = chain.run()
    with chain.ctx.catalog.connect() as con:
        con.execute("UPDATE stages SET status = 'gate_failed' WHERE stage = 'b'")
        con.execute("DELETE FROM datasets WHERE stage = 'b'")
    assert recover_run(chain.ctx.catalog, "r") == []
    assert b.path("problems").exists()


def test_guarded_run_removes_scratch_only_after_success(tmp_path):
    scratch = round_dir(tmp_path, "r", 0) / f".train-{'a' * 12}"
    scratch.mkdir(parents=True)
    with pytest.raises(RuntimeError), guarded_run(tmp_path, "r"):
        raise RuntimeError("crash")
    assert scratch.exists()
    with guarded_run(tmp_path, "r"):
        pass
    assert not scratch.exists()


def test_unrecorded_files_of_other_runs_are_untouched(chain):
    chain.run()
    other = write_atomic("problems", [_problem(0)],
                         dataset_path(chain.ctx.data_root, "other", 0, "problems", "e" * 32)).path
    recover_run(chain.ctx.catalog, "r")
    assert other.exists()


def test_a_finished_train_stages_scratch_is_swept_for_either_model(tmp_path):
    from storage.recovery import sweep_run

    folder = round_dir(tmp_path, "r", 1)
    folder.mkdir(parents=True)
    finished = {"a" * 12}
    names = [f".train-{'a' * 12}", f".train-proposer-{'a' * 12}",  # finished: leftovers
             f".train-{'b' * 12}", f".train-proposer-{'b' * 12}"]  # resumable: kept
    for name in names:
        (folder / name).mkdir()
    found = sweep_run(folder.parent, set(), set(), finished)
    assert sorted(f.path.name for f in found) == sorted(names[:2])
    assert sorted(p.name for p in folder.iterdir()) == sorted(names[2:])
