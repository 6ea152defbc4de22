"""What a round skips of Prefect's per-run costs (flows/run.py, flows/execution.py): task runs
carry no tags, and flow runs send no heartbeats to the run's own temporary server; a server
named by PREFECT_API_URL still gets them; the modules a run imported are frozen out of the
cyclic collector's full collections."""

from __future__ import annotations

import gc

from prefect import tags
from prefect.context import TagsContext
from prefect.settings import get_current_settings

from flows import execution
from flows.execution import freeze_imports, no_heartbeats_to
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


def test_what_was_imported_is_frozen_once(monkeypatch):
    """`execute` keeps the imported modules out of the collector's full collections: a second
    call with nothing imported since freezes nothing more (what runs made meanwhile stays
    collectable), one after an import freezes what it brought."""
    import sys

    gc.unfreeze()
    monkeypatch.setattr(execution, "_frozen_at", [])
    try:
        freeze_imports()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # Prefect and the project, imported above
        made = [[index] for index in range(1000)]  # what a run makes after the freeze
        freeze_imports()
        assert gc.get_freeze_count() == frozen and made
        monkeypatch.setitem(sys.modules, "a_stage_library", type(sys)("a_stage_library"))
        freeze_imports()
        assert gc.get_freeze_count() >= frozen + 1000
    finally:
        gc.unfreeze()


def test_the_stage_libraries_are_imported_before_the_rounds(monkeypatch):
    imported = []
    monkeypatch.setattr("importlib.import_module", imported.append)
    execution.import_stage_libraries(type("Config", (), {"rounds": 0})())
    assert imported == list(execution.STAGE_LIBRARIES)
    imported.clear()
    execution.import_stage_libraries(type("Config", (), {"rounds": 2})())
    assert imported == [*execution.STAGE_LIBRARIES, *execution.TRAINING_LIBRARIES]
