"""The round-0 incumbent: the built-in tiny model, or a local Hugging Face checkpoint folder."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from configs import ModelConfig
from storage.datasets import round_dir
from storage.fingerprint import stable_hash
from tasks.context import Checkpoint, RunContext
from tasks.model_card import checkpoint_meta, write_card
from tasks.stage import StageResult, checkpoint_dir, run_stage

VERSION = 1


def local_checkpoint(model: ModelConfig) -> Checkpoint:
    path = Path(model.path)
    config = path / "config.json"
    if not config.is_file():
        msg = (f"model.path = {model.path!r}: no config.json there (point it at a Hugging Face "
               "model folder)")
        raise FileNotFoundError(msg)
    sizes = sorted((p.name, p.stat().st_size) for p in path.glob("*.safetensors"))
    return Checkpoint(path=path,
                      fingerprint=stable_hash([json.loads(config.read_text()), sizes], length=32))


@task(name="base-model", cache_policy=NONE, persist_result=False)
def base_model(ctx: RunContext) -> Checkpoint:
    model = ctx.config.model
    if model.path is not None:
        return local_checkpoint(model)

    from models.tiny import build_tiny_model

    def compute(fingerprint: str) -> StageResult:
        parent = round_dir(ctx.data_root, ctx.run_id, 0)
        parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".base-", dir=parent))
        build_tiny_model(scratch, hidden_size=model.hidden_size, num_layers=model.num_layers,
                         head_dim=model.head_dim, intermediate_size=model.intermediate_size,
                         init_seed=model.init_seed)
        write_card(scratch, checkpoint_meta(ctx, stage="base", round_index=0,
                                            fingerprint=fingerprint, config=config))
        return StageResult(checkpoint=scratch)

    config = ctx.config.slice("model")
    out = run_stage(ctx, stage="base", version=VERSION, round_index=0, config=config, inputs={},
                    compute=compute)
    return Checkpoint(path=checkpoint_dir(ctx, 0, out.fingerprint), fingerprint=out.fingerprint)
