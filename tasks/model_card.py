"""The model card: a `README.md` with YAML metadata in every checkpoint folder the run writes, so a
checkpoint copied out of the data root still says where it came from. It loads with
`huggingface_hub.ModelCard.load(folder / "README.md")`; its `flywheel` mapping:

    flywheel:
      run_id: demo
      round: 2
      stage: train
      fingerprint: 9f3c0a...                  (the train stage's; names the folder)
      parent_checkpoint: {fingerprint: 51be..., folder: round-001/checkpoint-51be...}
      data: {train_rows: 77aa..., replay_round_0: 0c1d..., replay_round_1: e5f6...}
      training_rows: 2226
      seed: 1234567                           (the stage's seed)
      config: {domain: {...}, dtype: float32, batch_size: 64, ..., grpo: {...}}
                                              (the whole settings object the stage's
                                              fingerprint hashes, configs/settings.py:
                                              TrainSettings; round 0's WarmupTrainSettings,
                                              the base stage's BaseModelSettings)
      evaluation:                             (added by the promote stage)
        heldout_accuracy: 0.335
        evals: 2b7e...                        (the evaluate stage's fingerprint)
        incumbent: 51be...                    (the checkpoint it was compared with)
        incumbent_accuracy: 0.175
        promoted: true
        reason: accuracy 0.335 >= 0.175 - 0.000

The train (and base) stage writes the card into the folder before it is renamed into place and
its catalog row is written; the promote stage adds `evaluation` before its own row. The card is
deterministic (no times, no absolute paths: folders relative to the run's folder), so a resumed
run writes the same bytes as an uninterrupted one. Stage checksums cover the weights file only,
so the card is outside every fingerprint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks.context import Checkpoint, RunContext

CARD_NAME = "README.md"


def folder_name(ctx: RunContext, path: Path) -> str:
    """`path` relative to the run's folder when inside it (`round-001/checkpoint-...`), else as
    given (a local model folder, as the config names it)."""
    path, run_dir = Path(path), ctx.run_dir
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def checkpoint_meta(ctx: RunContext, *, stage: str, round_index: int, fingerprint: str,
                    config: dict[str, Any], parent: Checkpoint | None = None,
                    data: dict[str, str] | None = None, rows: int = 0) -> dict[str, Any]:
    """The card's `flywheel` mapping of a checkpoint a stage is writing (module docstring).

    Parameters
    ----------
    ctx
        The run.
    stage
        The stage writing it ("train", "base").
    round_index
        Its round.
    fingerprint
        The stage's fingerprint.
    config
        The stage's settings object as its fingerprint hashes it (`model_dump(mode="json")`).
    parent
        The checkpoint it was trained from (None for a model built from scratch).
    data
        Input name -> fingerprint of the datasets it was trained on.
    rows
        How many training rows it saw.
    """
    meta: dict[str, Any] = {"run_id": ctx.run_id, "round": round_index, "stage": stage,
                            "fingerprint": fingerprint}
    if parent is not None:
        meta["parent_checkpoint"] = {"fingerprint": parent.fingerprint,
                                     "folder": folder_name(ctx, parent.path)}
    if data:
        meta["data"] = dict(data)
        meta["training_rows"] = rows
    meta["seed"] = ctx.stage_seed(stage, round_index)
    meta["config"] = config
    return meta


def card_text(meta: dict[str, Any]) -> str:
    """The card for `meta` (the `flywheel` mapping above): YAML metadata, then a short text."""
    import yaml

    header = {"library_name": "transformers", "tags": ["flywheel", "self-improvement"],
              "flywheel": meta}
    where = f"round {meta['round']} of run `{meta['run_id']}`"
    parent = meta.get("parent_checkpoint")
    lines = [f"# Flywheel checkpoint: {where}", "",
             f"Written by the `{meta['stage']}` stage (fingerprint `{meta['fingerprint']}`)."]
    if parent:
        lines.append(f"Trained from `{parent['folder']}` on {meta.get('training_rows', 0)} rows.")
    evaluation = meta.get("evaluation")
    if evaluation:
        verdict = "promoted" if evaluation["promoted"] else "not promoted"
        lines.append(f"Held-out accuracy {evaluation['heldout_accuracy']:.3f}: {verdict} "
                     f"({evaluation['reason']}).")
    lines += ["", "The metadata above lists its inputs' fingerprints and the config it was "
              "trained with; `flywheel audit RUN_ID lineage CHECKPOINT` lists its training rows."]
    return ("---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n\n"
            + "\n".join(lines) + "\n")


def write_card(folder: Path, meta: dict[str, Any]) -> Path:
    """Write the card into `folder` atomically (a temporary file, then a rename); returns it."""
    path = Path(folder) / CARD_NAME
    temp = path.with_name(f".{CARD_NAME}.tmp-{os.getpid()}")
    temp.write_text(card_text(meta), encoding="utf-8")
    os.replace(temp, path)
    return path


def read_meta(folder: Path) -> dict[str, Any] | None:
    """The `flywheel` mapping of the card in `folder`; None when it has none (a local model
    folder, or a checkpoint written before cards existed)."""
    import yaml

    path = Path(folder) / CARD_NAME
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n") or "\n---\n" not in text[3:]:
        return None
    header = yaml.safe_load(text[4:text.index("\n---\n", 3)])
    meta = header.get("flywheel") if isinstance(header, dict) else None
    return meta if isinstance(meta, dict) else None


def add_evaluation(folder: Path, evaluation: dict[str, Any]) -> Path | None:
    """Add (or replace) the `evaluation` of the card in `folder`; None when it has no card."""
    meta = read_meta(folder)
    if meta is None:
        return None
    return write_card(folder, {**meta, "evaluation": evaluation})
