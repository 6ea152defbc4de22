"""A round's artifact (flows/run.py `publish_round_artifact`): published by a round flow that
recorded something; a round flow that recorded nothing (every stage found done, as in a resume)
publishes none while Prefect already holds one under the round's key."""

from __future__ import annotations

import shutil
from typing import Any

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from configs import load_config
from flows.run import RunSpec, publish_round_artifact
from storage.catalog import Catalog
from tests.conftest import SMALL_CONFIG

KEY = "flywheel-small-round-1"


@flow(validate_parameters=False)
def _round_flow_end(spec: RunSpec, catalog_before: tuple[Any, ...]) -> None:
    """What a round flow does last (an artifact belongs to a flow run)."""
    publish_round_artifact(spec, 1, catalog_before)


def _versions() -> list:
    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[KEY])))


def test_a_round_that_recorded_nothing_is_not_published_again(small_run_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(small_run_root, root, symlinks=True)
    spec = RunSpec(data_root=str(root), run_id="small", config=load_config(SMALL_CONFIG))
    catalog = Catalog(root)
    published = len(_versions())
    assert published >= 1  # by the session's run of small.toml

    _round_flow_end(spec, catalog.state())  # nothing recorded since the state
    assert len(_versions()) == published

    before = catalog.state()
    with catalog.connect():  # a write: the round's flow recorded something
        pass
    _round_flow_end(spec, before)
    assert len(_versions()) == published + 1

    with get_client(sync_client=True) as client:  # none under the key: published, recorded or not
        for artifact in _versions():
            client.delete_artifact(artifact.id)
    _round_flow_end(spec, catalog.state())
    assert len(_versions()) == 1
