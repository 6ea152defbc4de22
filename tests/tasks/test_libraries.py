"""Libraries frozen out of the cyclic collector's full collections (tasks/libraries.py): what a
process imported, once per import, and a stage's libraries before it first computes, only in a
process that froze its imports (`execute`)."""

from __future__ import annotations

import gc
import sys

import pytest

from configs import GatesConfig, RunConfig
from configs.settings import StageSettings
from tasks import libraries, stage
from tasks.context import RunContext
from tasks.stage import StageResult, run_stage


@pytest.fixture
def unfrozen(monkeypatch):
    """A process that froze nothing yet; whatever the test freezes is unfrozen after it."""
    gc.unfreeze()
    monkeypatch.setattr(libraries, "_frozen", [])
    yield
    gc.unfreeze()


def _collectable(thing: object) -> bool:
    """Whether the collector still sees `thing` (frozen objects are in none of its
    generations)."""
    return any(found is thing for found in gc.get_objects())


def test_what_was_imported_is_frozen_once_per_import(unfrozen, monkeypatch):
    libraries.freeze_imports()
    assert gc.get_freeze_count() > 10_000  # Prefect and the project, imported by the tests
    made = [[index] for index in range(10)]  # what a run makes after the freeze
    libraries.freeze_imports()
    assert _collectable(made)  # nothing imported since: nothing frozen
    monkeypatch.setitem(sys.modules, "a_library", type(sys)("a_library"))
    libraries.freeze_imports()
    assert not _collectable(made)


def _importer(monkeypatch) -> list[str]:
    """importlib.import_module as a list of the names asked for; each a new module."""
    asked: list[str] = []

    def import_module(name: str) -> None:
        asked.append(name)
        monkeypatch.setitem(sys.modules, f"fake.{name}", type(sys)(name))

    monkeypatch.setattr(libraries.importlib, "import_module", import_module)
    return asked


def test_a_stage_s_libraries_are_imported_and_frozen_only_where_imports_were(unfrozen,
                                                                             monkeypatch):
    asked = _importer(monkeypatch)
    made = [[index] for index in range(10)]
    libraries.import_for("train")
    assert asked == [] and _collectable(made)  # a test, a notebook: left as it is
    libraries.freeze_imports()
    made = [[index] for index in range(10)]
    libraries.import_for("train")
    assert asked == [*libraries.MODEL, *libraries.TRAINING]
    assert not _collectable(made)
    asked.clear()
    libraries.import_for("promote")  # imports none of them
    assert asked == [] and len(libraries._frozen) == 2


class Knob(StageSettings):
    value: int = 1


def test_only_a_stage_that_computes_imports_its_libraries(tmp_path, monkeypatch):
    imported: list[str] = []
    monkeypatch.setattr(stage, "import_for", imported.append)
    ctx = RunContext(data_root=tmp_path, run_id="r", config=RunConfig(
        gates=GatesConfig(enabled=False)))
    ctx.catalog.ensure_run("r", "{}")

    def once() -> None:
        run_stage(ctx, stage="promote", version=1, round_index=1, settings=Knob(), inputs={},
                  compute=lambda fingerprint: StageResult(datasets={}, metrics={"m": 1.0}))

    once()
    assert imported == ["promote"]
    once()  # found done: nothing imported
    assert imported == ["promote"]
