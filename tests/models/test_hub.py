"""`model.path` as a hub id (models/hub.py): resolved offline from a hub cache built here by hand
(tests/models/hub_cache.py, no network), pinned at the run's start to the snapshot's commit, a
missing one refused in one line naming the cache and the command that fills it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from configs import ConfigError, load_config
from configs.settings import DomainSettings
from models.hub import hub_cache, is_hub_id, locate_model
from models.preflight import ModelUnfit, check_model_folder
from tests.models.hub_cache import cache_snapshot, repo_folder

ROOT = Path(__file__).resolve().parents[2]
REPO = "Org/Tiny-Model"
OLD, NEW = "a" * 40, "b" * 40


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    from models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", hidden_size=32,
                            num_layers=1, head_dim=16, intermediate_size=32, init_seed=0)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty hub cache that HF_HUB_CACHE points at (HF_HUB_OFFLINE=1: tests/conftest.py)."""
    folder = tmp_path / "hub-cache"
    folder.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(folder))
    return folder


def test_a_hub_id_resolves_to_the_snapshot_main_names(cache, tiny_folder):
    cache_snapshot(cache, REPO, tiny_folder, commit=OLD)
    source = check_model_folder(REPO)
    assert source.folder == repo_folder(cache, REPO) / "snapshots" / OLD
    assert (source.path, source.revision) == (REPO, OLD)
    cache_snapshot(cache, REPO, tiny_folder, commit=NEW)  # a newer download moves refs/main
    assert check_model_folder(REPO).revision == NEW
    pinned = check_model_folder(REPO, OLD)  # the recorded revision: the same snapshot as before
    assert (pinned.folder.name, pinned.revision) == (OLD, OLD)


def test_a_branch_revision_is_recorded_as_its_commit(cache, tiny_folder):
    cache_snapshot(cache, REPO, tiny_folder, commit=NEW, ref="v2")
    assert check_model_folder(REPO, "v2").revision == NEW


def test_the_cache_follows_hf_home_when_hf_hub_cache_is_unset(tmp_path, monkeypatch,
                                                              tiny_folder):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert hub_cache() == tmp_path / "hf-home" / "hub"
    cache_snapshot(tmp_path / "hf-home" / "hub", REPO, tiny_folder)
    assert locate_model(REPO).folder.parent.parent == repo_folder(hub_cache(), REPO)


@pytest.mark.parametrize(("revision", "command"), [
    (None, f"`hf download {REPO}`"), (OLD, f"`hf download {REPO} --revision {OLD}`")])
def test_a_missing_hub_model_is_one_line_naming_the_cache_and_the_command(cache, revision,
                                                                          command):
    with pytest.raises(ModelUnfit) as caught:
        check_model_folder(REPO, revision)
    message = str(caught.value)
    assert message.startswith(f"model.path = {REPO!r}: not a local folder")
    assert str(cache) in message and command in message and "HF_HUB_OFFLINE=1" in message
    assert "\n" not in message


def test_an_incomplete_snapshot_names_the_snapshot_and_the_download(cache, tiny_folder):
    snapshot = cache_snapshot(cache, REPO, tiny_folder)
    (snapshot / "model.safetensors").unlink()
    with pytest.raises(ModelUnfit, match=rf"no weights .*{OLD} is incomplete: `hf download"):
        check_model_folder(REPO)


def test_a_local_folder_wins_over_a_hub_id_of_the_same_name(tmp_path, monkeypatch, cache,
                                                            tiny_folder):
    monkeypatch.chdir(tmp_path)
    local = tmp_path / "Org" / "Tiny-Model"
    local.parent.mkdir()
    local.symlink_to(tiny_folder, target_is_directory=True)
    assert not is_hub_id(REPO)
    assert check_model_folder(REPO).revision is None
    assert is_hub_id("Qwen/Qwen2.5-0.5B-Instruct") and is_hub_id("gpt2")
    assert not any(map(is_hub_id, ["/models/qwen", "./qwen", "~/qwen", "a/b/c", "a--b/c"]))


def test_a_revision_needs_a_hub_id(tiny_folder):
    with pytest.raises(ModelUnfit, match="is a local folder; unset model.revision"):
        check_model_folder(str(tiny_folder), OLD)
    with pytest.raises(ConfigError, match="model.*revision = 'main' without a path"):
        load_config(None, {"model.revision": "main"})


def test_the_base_checkpoint_and_the_fingerprints_do_not_depend_on_the_cache(cache,
                                                                             tiny_folder):
    """The base checkpoint of a hub id is its snapshot, with the fingerprint of the same files
    in a plain folder; the stages hash the id as written, not the cache's path."""
    from tasks.incumbent import local_checkpoint

    cache_snapshot(cache, REPO, tiny_folder, commit=OLD)
    config = load_config(None, {"model.path": REPO, "model.revision": OLD})
    base = local_checkpoint(config.model)
    assert base.path == repo_folder(cache, REPO) / "snapshots" / OLD
    assert base.fingerprint == local_checkpoint(load_config(
        None, {"model.path": str(tiny_folder)}).model).fingerprint
    assert DomainSettings.from_config(config).model_path == REPO


def test_the_run_start_pins_the_snapshot_it_resolved(cache, tiny_folder, tmp_path):
    """flows/cli.py's preflight returns the config the run records: the id and its commit."""
    from flows.cli import _check_before_start

    cache_snapshot(cache, REPO, tiny_folder, commit=NEW)
    config = load_config(None, {"model.path": REPO})
    recorded = _check_before_start(tmp_path / "data", config)
    assert (recorded.model.path, recorded.model.revision) == (REPO, NEW)
    assert recorded.model_copy(update={"model": config.model}) == config
    assert not (tmp_path / "data").exists()


def test_chat_prompts_use_the_snapshot_tokenizer(cache, tmp_path):
    from domains import get_domain
    from tests.models.chat_model import build_chat_model

    cache_snapshot(cache, REPO, build_chat_model(tmp_path / "chat"))
    config = load_config(None, {"model.path": REPO})
    prompt = get_domain(config.domain.name, config).solver_prompt("12+7")
    assert prompt.startswith("<|im_start|>user\n") and prompt.endswith("<|im_start|>assistant\n")


def test_flywheel_run_refuses_an_uncached_hub_id_in_one_line(tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "empty-cache")}
    env.pop("HF_HUB_OFFLINE", None)  # the CLI's own default (flows/environment.py) applies
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--set", f"model.path={REPO}",
         "--data-root", str(tmp_path / "data")], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=300, check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"`hf download {REPO}`" in lines[0], result.stderr
    assert str(tmp_path / "empty-cache") in lines[0] and "HF_HUB_OFFLINE=1" in lines[0]
    assert not (tmp_path / "data").exists()
