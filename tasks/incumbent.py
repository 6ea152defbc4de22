"""The round-0 incumbent: the built-in tiny model, or `model.path`'s Hugging Face checkpoint (a
local folder, or a hub id's snapshot in the local hub cache: models/hub.py). Its fingerprint
hashes the folder's config.json and weight file sizes, not where the folder is, so the same
model has the same fingerprint in any cache or copy.

Under `[proposer] separate = true` the proposer's round-0 checkpoint comes the same way from
`[proposer.model]` (`proposer_base`; a tiny one is built by the `proposer-base` stage)."""

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
from storage.fingerprint import file_checksum, stable_hash
from tasks.context import Checkpoint, RunContext
from tasks.model_card import checkpoint_meta, write_card
from tasks.stage import StageResult, checkpoint_dir, run_stage

VERSION = 1
# Round 0's decision under `[warmup] mode = "none"` (flows/run.py): no candidate, the base model
# stays the incumbent and round 1 starts from it.
NO_WARMUP = "no warm-up ([warmup] mode = 'none'): the base model starts round 1"


def local_checkpoint(model: ModelConfig, section: str = "model") -> Checkpoint:
    """The checkpoint of `model.path` (the `[model]` section's, or `section`'s)."""
    from models.hub import locate_model

    path = locate_model(model.path, model.revision, section=section).folder
    config = path / "config.json"
    if not config.is_file():
        msg = (f"{section}.path = {model.path!r}: no config.json there (point it at a Hugging Face "
               "model folder)")
        raise FileNotFoundError(msg)
    sizes = sorted((p.name, p.stat().st_size) for p in path.glob("*.safetensors"))
    return Checkpoint(path=path,
                      fingerprint=stable_hash([json.loads(config.read_text()), sizes], length=32))


def build_base(ctx: RunContext, settings: BaseModelSettings, fingerprint: str,
               stage: str = "base") -> StageResult:
    """The base stage's computation: the built-in tiny model of `settings`."""
    from models.tiny import build_tiny_model

    model = settings
    parent = round_dir(ctx.data_root, ctx.run_id, 0)
    parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".base-", dir=parent))
    build_tiny_model(scratch, hidden_size=model.hidden_size, num_layers=model.num_layers,
                     head_dim=model.head_dim, intermediate_size=model.intermediate_size,
                     init_seed=model.init_seed)
    write_card(scratch, checkpoint_meta(ctx, stage=stage, round_index=0, fingerprint=fingerprint,
                                        config=settings.model_dump(mode="json")))
    return StageResult(checkpoint=scratch)


def model_checkpoint(ctx: RunContext, model: ModelConfig, *, section: str,
                     stage: str) -> Checkpoint:
    """`model`'s round-0 checkpoint: its folder, or the tiny model the `stage` stage builds."""
    if model.path is not None:
        return local_checkpoint(model, section)
    settings = BaseModelSettings.from_model(model)
    out = run_stage(ctx, stage=stage, version=VERSION, round_index=0, settings=settings,
                    inputs={}, compute=partial(build_base, ctx, settings, stage=stage))
    return Checkpoint(path=checkpoint_dir(ctx, 0, out.fingerprint), fingerprint=out.fingerprint)


@task(name="base-model", cache_policy=NONE, persist_result=False)
def base_model(ctx: RunContext) -> Checkpoint:
    return model_checkpoint(ctx, ctx.config.model, section="model", stage="base")


TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "chat_template.jinja")


def tokenizer_digest(folder: Path) -> str:
    """A hash of a model folder's tokenizer files and chat template (what renders its prompts
    and reads its samples), whatever its weights."""
    files = {name: file_checksum(folder / name) for name in TOKENIZER_FILES
             if (folder / name).is_file()}
    config = folder / "tokenizer_config.json"
    template = (json.loads(config.read_text()).get("chat_template")
                if config.is_file() else None)
    return stable_hash([files, template], length=32)


@task(name="proposer-base", cache_policy=NONE, persist_result=False)
def proposer_base(ctx: RunContext, solver: Checkpoint) -> Checkpoint:
    """The separate proposer's round-0 checkpoint (`[proposer] separate = true`). It must share
    `solver`'s tokenizer and chat template: the domain renders every prompt, and reads every
    sample, with the solver's."""
    proposer = model_checkpoint(ctx, ctx.config.proposer.model, section="proposer.model",
                                stage="proposer-base")
    if tokenizer_digest(proposer.path) != tokenizer_digest(solver.path):
        msg = (f"proposer.model ({ctx.config.proposer.model.path or 'the tiny model'}) has "
               f"another tokenizer or chat template than the solver's model "
               f"({ctx.config.model.path or 'the tiny model'}): the prompts are rendered and the "
               "proposals read with the solver's; choose a proposer of the solver's family, or "
               "set proposer.separate = false")
        raise ValueError(msg)
    return proposer
