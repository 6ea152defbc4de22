"""Nightly rounds on a real Prefect server, and one round at a time per run id.

1. A `prefect server start --host 127.0.0.1` subprocess (own PREFECT_HOME in tmp) and a real
   `flywheel schedule serve --interval` whose first tick is 15 s ahead: the scheduled run
   completes round 1 of the run (seen through the Prefect client, `prefect flow-run ls` and the
   catalog); then both process groups are stopped and no process of theirs is left.
2. A nightly run paused inside its round holds the run's lock; a second night for the same run
   id, started meanwhile, ends Cancelled naming the first one's pid and writes nothing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from configs import load_config
from storage.catalog import Catalog

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "nightly.toml"
BIN = Path(sys.executable).parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "FLYWHEEL_TEST_"))}
    env.update(OMP_NUM_THREADS="1", PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               HF_HUB_OFFLINE="1", **extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None,
          log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    pytest.fail(f"{what} not seen within {timeout} s\n{tail}")


def _stop_group(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    """Stop a child started with start_new_session (its pid is its process group id)."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # stragglers of the group (flow-run subprocesses)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"process group {proc.pid} still had processes 10 s after it was stopped")


def _healthy(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.slow
def test_served_schedule_completes_a_round_on_a_real_server(tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    data_root = tmp_path / "data"
    server_log, serve_log = tmp_path / "server.log", tmp_path / "serve.log"
    server_out, serve_out = server_log.open("w"), serve_log.open("w")
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=_env(PREFECT_HOME=str(tmp_path / "prefect-home")), stdout=server_out,
        stderr=subprocess.STDOUT, start_new_session=True)
    serve = None
    client_env = _env(PREFECT_API_URL=url, PREFECT_HOME=str(tmp_path / "client-home"),
                      PREFECT_RUNNER_POLL_FREQUENCY="1", COLUMNS="250")  # untruncated `ls`
    try:
        _wait(lambda: _healthy(url), 120, "a healthy Prefect server", server, server_log)
        serve = subprocess.Popen(
            [str(BIN / "flywheel"), "schedule", "serve", "--config", str(CONFIG), "--data-root",
             str(data_root), "--interval", "3600"],
            env=client_env, stdout=serve_out, stderr=subprocess.STDOUT,
            start_new_session=True)

        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowFilter, FlowFilterName
        from prefect.settings import PREFECT_API_URL, temporary_settings

        def finished_runs():
            with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
                runs = client.read_flow_runs(
                    flow_filter=FlowFilter(name=FlowFilterName(any_=["flywheel-nightly"])))
            done = [r for r in runs if r.state is not None and r.state.is_final()]
            return done or None

        runs = _wait(finished_runs, 240, "a finished scheduled nightly run", serve, serve_log)
        run = runs[0]
        assert run.state.is_completed(), (run.state, serve_log.read_text()[-3000:])
        assert run.auto_scheduled, "the run came from the deployment's schedule"
        assert Catalog(data_root).last_decided_round("nightly-test") == 1
        listing = subprocess.run([str(BIN / "prefect"), "flow-run", "ls", "--limit", "20"],
                                 env=client_env, capture_output=True, text=True, timeout=60,
                                 check=True).stdout
        assert run.name in listing and "COMPLETED" in listing, listing
    finally:
        if serve is not None:
            _stop_group(serve)
        _stop_group(server, signal.SIGTERM)
        server_out.close()
        serve_out.close()


PAUSE_POINT = "rollout:1:start"


def test_second_night_for_the_same_run_is_refused_while_one_runs(tmp_path, prefect_server):
    data_root = tmp_path / "data"
    marker = tmp_path / "paused"
    cfg = load_config(CONFIG)
    script = (
        "import sys; from configs import load_config; "
        "from flows.nightly import nightly_round; "
        "from schedules.deployments import deployment_parameters; "
        f"nightly_round(**deployment_parameters({str(data_root)!r}, load_config({str(CONFIG)!r})))"
    )
    first = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env=_env(PREFECT_API_URL=prefect_server, FLYWHEEL_TEST_PAUSE_AT=PAUSE_POINT,
                 FLYWHEEL_TEST_PAUSE_FILE=str(marker)), start_new_session=True)
    try:
        _wait(lambda: marker.exists(), 180, f"the first night paused at {PAUSE_POINT}", first)
        catalog = Catalog(data_root)
        before = catalog.query("SELECT * FROM stages ORDER BY started_at")

        from flows.nightly import nightly_round
        from schedules.deployments import deployment_parameters

        started = time.monotonic()
        state = nightly_round(**deployment_parameters(data_root, cfg), return_state=True)
        assert time.monotonic() - started < 60, "refused at once, not after waiting for the first"
        assert state.is_cancelled(), state
        assert f"pid {first.pid}" in state.message and "already running" in state.message
        assert catalog.query("SELECT * FROM stages ORDER BY started_at") == before, \
            "the refused night wrote no stage rows"
        assert first.poll() is None, "the first night is untouched"
    finally:
        _stop_group(first, signal.SIGKILL)
        first.stderr.close()
