"""Shared fixtures. One Prefect test server per session (it takes 10-20 s to start), and one
finished run of tests/flows/small.toml (minutes of training) for the tests that read one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flows.environment import MODEL_DEFAULTS, set_defaults  # pins the CPU kernels before torch

set_defaults(MODEL_DEFAULTS)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs the suite on two pytest-xdist workers with `--dist loadfile
    --no-loadscope-reorder`: one test file is one unit of work, handed out in collection order
    (below), so a module's fixtures are built once. The files that read the small run are one
    unit together, so it is trained once. (xdist's `xdist_group` marks cannot do this under
    pytest 9, whose node ids no longer read the `_nodeid` they rewrite.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    tests = Path(__file__).parent  # the files that read the small run name its fixture
    readers = {str(path.relative_to(tests.parent)) for path in tests.rglob("test_*.py")
               if "small_run_root" in path.read_text()}

    class SmallRunTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "small-run" if path in readers else path

    return SmallRunTogether(config, log)


def pytest_collection_modifyitems(items):
    """The files with slow tests first, each file's tests kept together and in their order:
    the two workers then end on quick files, not one of them on a long one."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(scope="session")
def prefect_server():
    """A temporary Prefect server for the whole session; yields its API URL."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


SMALL_CONFIG = Path(__file__).parent / "flows" / "small.toml"


@pytest.fixture(scope="session")
def small_run_root(tmp_path_factory, prefect_server) -> Path:
    """The data root of a finished run `small` of tests/flows/small.toml (the warm-up and one
    round), made once per session, in process: read it as it is, or copy it before changing
    anything in it."""
    from configs import load_config
    from flows.run import RunSpec, flywheel_flow

    root = tmp_path_factory.mktemp("small-run")
    flywheel_flow(RunSpec(data_root=str(root), run_id="small",
                          config=load_config(SMALL_CONFIG)))
    return root


@pytest.fixture
def judge_folder(tmp_path, monkeypatch) -> Path:
    """A scripted LLM judge's folder (tests/tasks/scripted_judge.py): a tiny chat model whose
    backend marks arithmetic answers PASS or FAIL from the prompt."""
    from tests.tasks.scripted_judge import scripted_judge_folder

    return scripted_judge_folder(tmp_path, monkeypatch)
