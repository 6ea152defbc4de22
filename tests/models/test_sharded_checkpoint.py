"""Checkpoint checksums cover every shard of a sharded save (storage/fingerprint.py
`checkpoint_checksum`; the train stage records it, recovery checks it)."""

from __future__ import annotations

import shutil

import pytest

from models.tiny import build_tiny_model
from storage.fingerprint import SHARD_INDEX, checkpoint_checksum, file_checksum
from storage.recovery import check_recorded


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny model saved whole and in shards of at most 100 kB."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("sharded")
    whole = build_tiny_model(root / "whole", hidden_size=64, num_layers=2, head_dim=32,
                             intermediate_size=128, init_seed=0)
    sharded = root / "sharded"
    shutil.copytree(whole, sharded)
    (sharded / "model.safetensors").unlink()
    AutoModelForCausalLM.from_pretrained(whole).save_pretrained(sharded, max_shard_size="100KB")
    return whole, sharded


def _shards(folder):
    return sorted(folder.glob("model-*-of-*.safetensors"))


def test_a_whole_checkpoint_keeps_its_weights_file_checksum(saved):
    whole, _ = saved
    assert checkpoint_checksum(whole) == file_checksum(whole / "model.safetensors")


def test_every_shard_and_the_index_change_the_checksum(saved, tmp_path):
    _, sharded = saved
    assert len(_shards(sharded)) >= 3 and (sharded / SHARD_INDEX).is_file()
    recorded = checkpoint_checksum(sharded)
    assert checkpoint_checksum(sharded) == recorded  # stable
    for name in [p.name for p in _shards(sharded)] + [SHARD_INDEX]:
        copy = tmp_path / name
        shutil.copytree(sharded, copy)
        target = copy / name
        data = bytearray(target.read_bytes())
        if name == SHARD_INDEX:
            data += b" "  # the index still parses
        else:
            data[-1] ^= 1  # one bit of the shard
        target.write_bytes(bytes(data))
        assert checkpoint_checksum(copy) != recorded, name


def test_recovery_finds_a_changed_or_missing_shard(saved, tmp_path):
    _, sharded = saved
    copy = tmp_path / "checkpoint"
    shutil.copytree(sharded, copy)
    recorded = {"checkpoint": {"path": str(copy), "rows": 0,
                               "checksum": checkpoint_checksum(sharded)}}
    assert check_recorded(recorded) is None
    last = _shards(copy)[-1]
    data = bytearray(last.read_bytes())
    data[-1] ^= 1
    last.write_bytes(bytes(data))
    path, reason = check_recorded(recorded)
    assert path == copy and reason.startswith("weights changed since they were recorded")
    last.unlink()
    path, reason = check_recorded(recorded)
    assert path == copy and last.name in reason and "\n" not in reason
