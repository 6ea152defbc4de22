"""What a round skips of Prefect's per-run costs (flows/run.py, flows/execution.py): task runs
carry no tags, and flow runs send no heartbeats to the run's own temporary server; a server
named by PREFECT_API_URL still gets them. (What a run imports is frozen out of the cyclic
collector's full collections: tests/tasks/test_libraries.py.)"""

from __future__ import annotations

from prefect import tags
from prefect.context import TagsContext
from prefect.settings import get_current_settings

from flows.execution import no_heartbeats_to
from flows.run import untagged_task_runs


def test_task_runs_created_inside_carry_no_tags_and_the_flow_runs_keep_theirs():
    with tags("run:demo"):
        with untagged_task_runs():
            assert TagsContext.get().current_tags == set()
        assert TagsContext.get().current_tags == {"run:demo"}


def test_no_heartbeats_to_our_own_server_only():
    default = get_current_settings().flows.heartbeat_frequency
    assert default is not None  # Prefect sends them unless told otherwise
    with no_heartbeats_to(object()):  # the run's own temporary server
        assert get_current_settings().flows.heartbeat_frequency is None
    with no_heartbeats_to(None):  # PREFECT_API_URL: somebody else's server
        assert get_current_settings().flows.heartbeat_frequency == default
    assert get_current_settings().flows.heartbeat_frequency == default


