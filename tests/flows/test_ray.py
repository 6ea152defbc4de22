"""Scale-out on Ray (config [scale], flows/runners.py, tasks/shards.py).

1. One tiny run (warm-up + one round) on the default runner in one piece, and the same run with
   `task_runner = "ray"` and two shards per stage on a local 2-CPU Ray instance against the
   session's real Prefect server: the catalogs agree stage by stage on fingerprints, row counts
   and file checksums; the shards ran as Prefect tasks (seen through the API); Ray is shut down
   and none of its processes is left.
2. Shard boundaries: every shard starts on a rollout batch, a problem's rollouts stay together.
3. `task_runner = "ray"` without PREFECT_API_URL is one line naming `make server`.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from configs import load_config
from storage.catalog import Catalog
from tasks.shards import batch_aligned_ranges, grouped_ranges

TINY = """
rounds = 1
[domain]
seed_problems = 200
min_level = 1
max_level = 2
seed_max_level = 1
heldout_per_level = 3
[synthesize]
proposals = 64
[rollout]
samples_per_problem = 4
batch_size = 32   # small batches, so both stages of both rounds have at least two shards
[train]
max_steps = 5
[train.warmup]
max_steps = 30
[gates]
enabled = false
"""
RAY = "\n[scale]\ntask_runner = \"ray\"\nrollout_shards = 2\nray_num_cpus = 2\n"


def _recorded(data_root: Path, run_id: str) -> list[tuple]:
    """Every completed output: (round, stage, fingerprint, kind, rows, checksum, relative path)."""
    rows = Catalog(data_root).query(
        "SELECT s.round, s.stage, s.fingerprint, d.kind, d.rows, d.checksum, d.path "
        "FROM stages s JOIN datasets d USING (run_id, fingerprint) "
        "WHERE s.run_id = ? AND s.status = 'completed' ORDER BY s.round, s.stage, d.kind",
        [run_id])
    return [(r["round"], r["stage"], r["fingerprint"], r["kind"], r["rows"], r["checksum"],
             r["path"]) for r in rows]  # recorded relative to the root


def _ray_processes(session: str, api_url: str) -> list[str]:
    """Processes of that Ray session: its daemons name it on their command line; its workers
    (renamed `ray::...`) carry the run's PREFECT_API_URL from the runtime environment."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        worker = cmdline.startswith("ray::") and f"PREFECT_API_URL={api_url}".encode() in environ
        if session in cmdline or worker:
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


@pytest.mark.slow  # about 90 s: two tiny runs, Ray's start and its workers' imports
def test_ray_run_has_the_default_runs_fingerprints_rows_and_checksums(tmp_path, prefect_server,
                                                                      monkeypatch):
    pytest.importorskip("ray", reason="the ray extra is not installed: pip install -e '.[ray]'")
    pytest.importorskip("prefect_ray",
                        reason="the ray extra is not installed: pip install -e '.[ray]'")
    import ray

    from flows.run import RunSpec, flywheel_flow

    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "WARNING")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    (tmp_path / "default.toml").write_text(TINY)
    (tmp_path / "ray.toml").write_text(TINY + RAY)
    seconds = {}
    for name in ("default", "ray"):
        cfg = load_config(tmp_path / f"{name}.toml")
        started = time.monotonic()
        if name == "ray":
            since = datetime.now(UTC)
        flywheel_flow(RunSpec(data_root=str(tmp_path / name), run_id="same", config=cfg))
        seconds[name] = time.monotonic() - started
    print(f"\nwall time, warm-up + 1 round: default {seconds['default']:.1f} s, "
          f"ray (2 shards, 2 CPUs, incl. Ray start/stop) {seconds['ray']:.1f} s")

    default, on_ray = _recorded(tmp_path / "default", "same"), _recorded(tmp_path / "ray", "same")
    assert {stage for _, stage, *_ in default} >= {"rollout", "verify", "train", "evaluate"}
    assert on_ray == default

    # The shards really ran as Prefect tasks (on Ray workers), two per stage and round.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        TaskRunFilter,
        TaskRunFilterName,
        TaskRunFilterStartTime,
    )

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(task_run_filter=TaskRunFilter(
            name=TaskRunFilterName(like_="-shard-"),
            start_time=TaskRunFilterStartTime(after_=since)))
    names = sorted(r.name for r in runs if r.state is not None and r.state.is_completed())
    assert names.count("rollout-shard-1") == 2 and names.count("verify-shard-1") == 2, names

    # Ray was started for the run and shut down after it; none of its processes is left.
    assert not ray.is_initialized()
    session = os.path.basename(os.path.realpath("/tmp/ray/session_latest"))
    assert session.startswith("session_")
    deadline = time.monotonic() + 15
    while (left := _ray_processes(session, prefect_server)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left


@pytest.mark.parametrize(("items", "per_item", "batch", "shards", "expected"), [
    (200, 1, 32, 2, [(0, 96), (96, 200)]),
    (1000, 4, 512, 4, [(0, 256), (256, 512), (512, 768), (768, 1000)]),
    (30, 4, 32, 8, [(0, 8), (8, 16), (16, 24), (24, 30)]),   # fewer batches than shards
    (100, 16, 512, 3, [(0, 32), (32, 64), (64, 100)]),       # 32 problems x 16 = one batch
    (20, 16, 512, 3, [(0, 20)]),                              # one batch: one shard
    (10, 3, 4, 2, [(0, 4), (4, 10)]),                         # 4 items = 12 sequences = 3 batches
    (0, 4, 32, 2, [(0, 0)]),
])
def test_shards_start_on_batch_boundaries(items, per_item, batch, shards, expected):
    ranges = batch_aligned_ranges(items, per_item, batch, shards)
    assert ranges == expected
    assert all(start * per_item % batch == 0 for start, _ in ranges)


def test_rollout_shards_sample_what_the_whole_stage_samples(tmp_path):
    """Pieces starting on batch boundaries (with k > 1 samples and uneven prompt lengths, so
    batches are padded) give the unsharded rows, in order; a piece off a boundary does not."""
    import random

    from configs import RolloutConfig
    from domains import get_domain
    from models.backends import SamplingParams
    from models.tiny import build_tiny_model
    from tasks.rollout import rollout_shard

    build_tiny_model(tmp_path, hidden_size=32, num_layers=1, head_dim=8, intermediate_size=64,
                     init_seed=0)
    domain, rng = get_domain("arithmetic"), random.Random(0)
    problems = [{"problem_id": f"p{i}", "text": domain.generate(rng, 1 + i % 4).text}
                for i in range(22)]
    config = RolloutConfig(batch_size=8, max_new_tokens=6, temperature=1.0)
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=6, seed=11)

    def piece(start: int, end: int) -> list[dict]:
        return rollout_shard(rollout=config, checkpoint_dir=str(tmp_path), domain=domain,
                             problems=problems[start:end],
                             params=replace(params, first_prompt=start),
                             checkpoint="c", run_id="r", round_index=1)

    whole = piece(0, len(problems))
    ranges = batch_aligned_ranges(len(problems), params.n, config.batch_size, 3)
    assert len(ranges) == 3
    assert [row for start, end in ranges for row in piece(start, end)] == whole
    off_boundary = piece(1, 3)  # starts mid-batch: other padding and seed, other samples
    assert [r["completion"] for r in off_boundary] != [r["completion"] for r in whole[4:12]]

    chunks: list[list[dict]] = []  # about 24 rollouts a chunk: 4 chunks of whole batches
    assert rollout_shard(rollout=config, checkpoint_dir=str(tmp_path), domain=domain,
                         problems=problems, params=params, checkpoint="c", run_id="r",
                         round_index=1, sink=chunks.append, chunk_rows=24) == []
    assert len(chunks) == 4 and all(len(chunk) % config.batch_size == 0 for chunk in chunks[:-1])
    assert [row for chunk in chunks for row in chunk] == whole


def test_a_problems_rollouts_stay_in_one_shard():
    keys = list("aaabbbbcdddd")
    ranges = grouped_ranges(keys, 3)
    assert ranges == [(0, 3), (3, 7), (7, 12)]
    assert grouped_ranges(list("abab"), 2) == [(0, 4)]  # not grouped: one shard


def test_ray_without_a_prefect_server_is_one_line_naming_make_server(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="the ray extra is not installed: pip install -e '.[ray]'")
    for key, value in {"PREFECT_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1",  # the CLI's
                       "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error",
                       "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore"}.items():
        monkeypatch.setenv(key, value)  # setdefault()s, undone after the test
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from typer.testing import CliRunner

    from flows.cli import app

    (tmp_path / "ray.toml").write_text(TINY + RAY)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):  # no server, whatever ran before
        result = CliRunner().invoke(app, ["run", "--config", str(tmp_path / "ray.toml"),
                                          "--data-root", str(tmp_path / "data"), "--run-id", "r"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "make server" in lines[0] and "PREFECT_API_URL" in lines[0], lines
    assert not (tmp_path / "data").exists(), "nothing ran, nothing was written"
