"""The round-0 incumbent: the built-in tiny model, or `model.path`'s Hugging Face checkpoint (a
local folder, or a hub id's snapshot in the local hub cache: models/hub.py). Its fingerprint
hashes the folder's config.json and weight file sizes, not where the folder is, so the same
model has the same fingerprint in any cache or copy."""

from __future__ import annotations

import json
import tempfile
from functools import partial
from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from configs import ModelConfig
from configs.settings import BaseModelSettings
from storage.datasets import round_dir
from storage.fingerprint import stable_hash
from tasks.context import Checkpoint, RunContext
from tasks.model_card import checkpoint_meta, write_card
from tasks.stage import StageResult, checkpoint_dir, run_stage

VERSION = 1
# Round 0's decision under `[warmup] mode = "none"` (flows/run.py): no candidate, the base model
# stays the incumbent and round 1 starts from it.
NO_WARMUP = "no warm-up ([warmup] mode = 'none'): the base model starts round 1"


def local_checkpoint(model: ModelConfig) -> Checkpoint:
    from models.hub import locate_model

    path = locate_model(model.path, model.revision).folder
    config = path / "config.json"
    if not config.is_file():
        msg = (f"model.path = {model.path!r}: no config.json there (point it at a Hugging Face "
               "model folder)")
        raise FileNotFoundError(msg)
    sizes = sorted((p.name, p.stat().st_size) for p in path.glob("*.safetensors"))
    return Checkpoint(path=path,
                      fingerprint=stable_hash([json.loads(config.read_text()), sizes], length=32))


def build_base(ctx: RunContext, settings: BaseModelSettings, fingerprint: str) -> StageResult:
    """The base stage's computation: the built-in tiny model of `settings`."""
    from models.tiny import build_tiny_model

    model = settings
    parent = round_dir(ctx.data_root, ctx.run_id, 0)
    parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".base-", dir=parent))
    build_tiny_model(scratch, hidden_size=model.hidden_size, num_layers=model.num_layers,
                     head_dim=model.head_dim, intermediate_size=model.intermediate_size,
                     init_seed=model.init_seed)
    write_card(scratch, checkpoint_meta(ctx, stage="base", round_index=0, fingerprint=fingerprint,
                                        config=settings.model_dump(mode="json")))
    return StageResult(checkpoint=scratch)


@task(name="base-model", cache_policy=NONE, persist_result=False)
def base_model(ctx: RunContext) -> Checkpoint:
    if ctx.config.model.path is not None:
        return local_checkpoint(ctx.config.model)
    settings = BaseModelSettings.from_config(ctx.config)
    out = run_stage(ctx, stage="base", version=VERSION, round_index=0, settings=settings,
                    inputs={}, compute=partial(build_base, ctx, settings))
    return Checkpoint(path=checkpoint_dir(ctx, 0, out.fingerprint), fingerprint=out.fingerprint)
