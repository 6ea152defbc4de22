"""The model card: a `README.md` in every checkpoint folder the run writes, so a checkpoint copied
out of the data root still says where it came from. It is huggingface_hub's `ModelCard` with
`ModelCardData` metadata, so the Hub and every tool that reads cards see the standard keys:

    base_model: Qwen/Qwen2.5-0.5B-Instruct    (the run's starting model: its hub id, its local
                                              folder, or the built-in tiny model's description)
    datasets: [77aa..., 0c1d..., e5f6...]     (the fingerprints of the training rows it saw)
    library_name: transformers
    tags: [flywheel, self-improvement]
    flywheel: {...}                           (below)
    model-index:                              (once the promote stage evaluated it)
    - name: flywheel demo round 2
      results:
      - task: {type: text-generation, name: held-out problems}
        dataset: {name: arithmetic held-out set, type: flywheel-heldout-arithmetic,
                  split: heldout}
        metrics:
        - {type: accuracy, value: 0.335, name: held-out accuracy,
           args: {interval: [0.29, 0.38]}}   (args: only when the evaluation has an interval)

`ModelCard.load(folder / "README.md").data.to_dict()["flywheel"]` is the provenance:

    flywheel:
      run_id: demo
      round: 2
      stage: train
      fingerprint: 9f3c0a...                  (the train stage's; names the folder)
      base_model: Qwen/Qwen2.5-0.5B-Instruct  (what the top-level `base_model` is written from)
      parent_checkpoint: {fingerprint: 51be..., folder: round-001/checkpoint-51be...}
      lineage:                                (every checkpoint before it, oldest first)
      - {round: 0, stage: base, fingerprint: 0a1b..., folder: round-000/checkpoint-0a1b...}
      - {round: 1, stage: train, fingerprint: 51be..., folder: round-001/checkpoint-51be...,
         training_rows: 1800, heldout_accuracy: 0.175, promoted: true}
      data: {train_rows: 77aa..., replay_round_0: 0c1d..., replay_round_1: e5f6...}
      training_rows: 2226
      seed: 1234567                           (the stage's seed)
      config: {domain: {...}, dtype: float32, batch_size: 64, ..., grpo: {...}}
                                              (the whole settings object the stage's
                                              fingerprint hashes, configs/settings.py:
                                              TrainSettings; round 0's WarmupTrainSettings,
                                              the base stage's BaseModelSettings)
      benchmarks:                             (added by the evaluate stage with
        gsm8k: {accuracy: 0.41, accuracy_low: 0.38, ...}   [evaluate] benchmarks: one
                                              model-index entry each, tasks/benchmarks.py)
      evaluation:                             (added by the promote stage)
        heldout_accuracy: 0.335
        evals: 2b7e...                        (the evaluate stage's fingerprint)
        incumbent: 51be...                    (the checkpoint it was compared with)
        incumbent_accuracy: 0.175
        promoted: true
        reason: accuracy 0.335 >= 0.175 - 0.000
        (heldout_accuracy_low, heldout_accuracy_high: the interval, when the promote stage
         passes one; it becomes the model-index metric's `args.interval`)

The body says the same in words and draws the lineage as a table. The lineage is read from the
parent's card when the checkpoint is written (each card carries its parent's lineage plus the
parent), so it needs no catalog and survives a copy of the folder.

The train (and base) stage writes the card into the folder before it is renamed into place and
its catalog row is written; the promote stage adds `evaluation` before its own row. The card is
deterministic (no times, no absolute paths: folders relative to the run's folder), so a resumed
run writes the same bytes as an uninterrupted one. Stage checksums cover the weights file only
(storage/fingerprint.py `checkpoint_checksum`), so the card is outside every fingerprint.

`base_model` on the Hub is meant to be a hub id; a local folder or the tiny model's description
is written as it is (pushing such a card, replace it with the id the model came from).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks.context import Checkpoint, RunContext

CARD_NAME = "README.md"
TAGS = ["flywheel", "self-improvement"]
TINY_MODEL = "flywheel tiny Llama"  # the base stage's model (models/tiny.py)
HUB_CACHE_PREFIX = "models--"  # a Hugging Face cache folder: models--<owner>--<name>/snapshots/..


def folder_name(ctx: RunContext, path: Path) -> str:
    """`path` relative to the run's folder when inside it (`round-001/checkpoint-...`), else as
    given (a local model folder, as the config names it)."""
    path, run_dir = Path(path), ctx.run_dir
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def hub_id(path: Path) -> str | None:
    """The hub id of a folder inside the Hugging Face cache (`.../models--Qwen--Qwen2.5-0.5B/
    snapshots/<sha>` is `Qwen/Qwen2.5-0.5B`), else None: a model resolved from a hub id keeps
    that id as its card's `base_model`, not the cache path of this machine."""
    for part in Path(path).parts:
        if part.startswith(HUB_CACHE_PREFIX) and len(part) > len(HUB_CACHE_PREFIX):
            return part.removeprefix(HUB_CACHE_PREFIX).replace("--", "/")
    return None


def starting_model(ctx: RunContext, parent: Checkpoint | None, parent_meta: dict[str, Any] | None,
                   config: dict[str, Any]) -> str:
    """The run's starting model, the card's `base_model`: the parent's when it has a card (so
    every checkpoint of a run names the same one), else the parent itself (a local folder or
    hub id: the run's `model.path`), else (a model built from scratch, `config` its settings)
    the tiny model's description."""
    if parent is None:
        return f"{TINY_MODEL} ({', '.join(f'{k} {v}' for k, v in config.items())})"
    if parent_meta and parent_meta.get("base_model"):
        return parent_meta["base_model"]
    return hub_id(parent.path) or folder_name(ctx, parent.path)


def lineage_of(ctx: RunContext, parent: Checkpoint,
               parent_meta: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The lineage of a checkpoint trained from `parent`: the parent's own lineage, then the
    parent with its round, stage, training rows and held-out result as its card records them."""
    entry: dict[str, Any] = {"fingerprint": parent.fingerprint,
                             "folder": folder_name(ctx, parent.path)}
    if parent_meta is None:  # a model from outside the run (`model.path`)
        return [{"round": None, "stage": "model.path", **entry}]
    entry = {"round": parent_meta.get("round"), "stage": parent_meta.get("stage"), **entry}
    if "training_rows" in parent_meta:
        entry["training_rows"] = parent_meta["training_rows"]
    evaluation = parent_meta.get("evaluation")
    if evaluation:
        entry["heldout_accuracy"] = evaluation["heldout_accuracy"]
        entry["promoted"] = evaluation["promoted"]
    return [*parent_meta.get("lineage", []), entry]


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
    parent_meta = None if parent is None else read_meta(parent.path)
    meta: dict[str, Any] = {"run_id": ctx.run_id, "round": round_index, "stage": stage,
                            "fingerprint": fingerprint,
                            "base_model": starting_model(ctx, parent, parent_meta, config)}
    if parent is not None:
        meta["parent_checkpoint"] = {"fingerprint": parent.fingerprint,
                                     "folder": folder_name(ctx, parent.path)}
        meta["lineage"] = lineage_of(ctx, parent, parent_meta)
    if data:
        meta["data"] = dict(data)
        meta["training_rows"] = rows
    meta["seed"] = ctx.stage_seed(stage, round_index)
    meta["config"] = config
    return meta


def eval_results(meta: dict[str, Any]) -> list[Any]:
    """The card's model-index entries (huggingface_hub `EvalResult`s): the held-out accuracy
    the promote stage recorded, with its interval when the evaluation has one; none before."""
    from huggingface_hub import EvalResult

    evaluation = meta.get("evaluation")
    if not evaluation:
        return []
    domain = ((meta.get("config") or {}).get("domain") or {}).get("domain", {}).get("name",
                                                                                    "domain")
    low, high = evaluation.get("heldout_accuracy_low"), evaluation.get("heldout_accuracy_high")
    interval = {"interval": [low, high]} if low is not None and high is not None else None
    return [EvalResult(task_type="text-generation", task_name="held-out problems",
                       dataset_type=f"flywheel-heldout-{domain}",
                       dataset_name=f"{domain} held-out set", dataset_split="heldout",
                       metric_type="accuracy", metric_value=evaluation["heldout_accuracy"],
                       metric_name="held-out accuracy", metric_args=interval),
            *benchmark_results(meta.get("benchmarks") or {})]


def benchmark_results(benchmarks: dict[str, dict[str, Any]]) -> list[Any]:
    """One model-index entry per benchmark file (`[evaluate] benchmarks`): its accuracy (pass@1)
    with its 95 % interval, as the evaluate stage recorded it (`add_benchmarks`)."""
    from huggingface_hub import EvalResult

    results = []
    for name, figures in sorted(benchmarks.items()):
        low, high = figures.get("accuracy_low"), figures.get("accuracy_high")
        interval = {"interval": [low, high]} if low is not None and high is not None else None
        results.append(EvalResult(task_type="text-generation", task_name=f"benchmark {name}",
                                  dataset_type=f"flywheel-benchmark-{name}", dataset_name=name,
                                  dataset_split="test", metric_type="accuracy",
                                  metric_value=figures["accuracy"],
                                  metric_name=f"{name} accuracy", metric_args=interval))
    return results


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "promoted" if value else "not promoted"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def lineage_table(meta: dict[str, Any]) -> list[str]:
    """The body's lineage: one Markdown row per checkpoint before this one, then this one."""
    evaluation = meta.get("evaluation") or {}
    this = {"round": meta["round"], "stage": meta["stage"], "folder": "this checkpoint",
            "training_rows": meta.get("training_rows"),
            "heldout_accuracy": evaluation.get("heldout_accuracy"),
            "promoted": evaluation.get("promoted")}
    lines = ["| round | stage | checkpoint | training rows | held-out accuracy | decision |",
             "|---|---|---|---|---|---|"]
    for entry in [*meta.get("lineage", []), this]:
        folder = entry["folder"] if entry is this else f"`{entry['folder']}`"
        lines.append("| " + " | ".join([_cell(entry.get("round")), _cell(entry.get("stage")),
                                         folder, _cell(entry.get("training_rows")),
                                         _cell(entry.get("heldout_accuracy")),
                                         _cell(entry.get("promoted"))]) + " |")
    return lines


def card_body(meta: dict[str, Any]) -> str:
    """The card's Markdown below the metadata: what wrote it, from what, its result, lineage."""
    where = f"round {meta['round']} of run `{meta['run_id']}`"
    parent = meta.get("parent_checkpoint")
    lines = [f"# Flywheel checkpoint: {where}", "",
             f"Written by the `{meta['stage']}` stage (fingerprint `{meta['fingerprint']}`); "
             f"the run started from `{meta.get('base_model')}`."]
    if parent:
        lines.append(f"Trained from `{parent['folder']}` on {meta.get('training_rows', 0)} rows.")
    evaluation = meta.get("evaluation")
    if evaluation:
        verdict = "promoted" if evaluation["promoted"] else "not promoted"
        lines.append(f"Held-out accuracy {evaluation['heldout_accuracy']:.3f}: {verdict} "
                     f"({evaluation['reason']}).")
    for name, figures in sorted((meta.get("benchmarks") or {}).items()):
        lines.append(f"Benchmark `{name}`: accuracy {figures['accuracy']:.3f}.")
    lines += ["", "## Lineage", "", *lineage_table(meta), "",
              "The metadata above lists its inputs' fingerprints and the config it was "
              "trained with; `flywheel audit RUN_ID lineage CHECKPOINT` lists its training rows."]
    return "\n".join(lines) + "\n"


def card_text(meta: dict[str, Any]) -> str:
    """The card for `meta` (the `flywheel` mapping above): `ModelCardData` metadata, then the
    body, as `ModelCard` renders it."""
    from huggingface_hub import ModelCard, ModelCardData

    results = eval_results(meta)
    data = ModelCardData(
        base_model=meta.get("base_model"), datasets=list((meta.get("data") or {}).values()) or None,
        library_name="transformers", tags=TAGS, flywheel=meta,
        **({"model_name": f"flywheel {meta['run_id']} round {meta['round']}",
            "eval_results": results} if results else {}))
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{card_body(meta)}").content


def write_card(folder: Path, meta: dict[str, Any]) -> Path:
    """Write the card into `folder` atomically (a temporary file, then a rename); returns it."""
    path = Path(folder) / CARD_NAME
    temp = path.with_name(f".{CARD_NAME}.tmp-{os.getpid()}")
    temp.write_text(card_text(meta), encoding="utf-8")
    os.replace(temp, path)
    return path


def read_meta(folder: Path) -> dict[str, Any] | None:
    """The `flywheel` mapping of the card in `folder`; None when it has none (a local model
    folder, whose own README may have other metadata, or a checkpoint written before cards)."""
    from huggingface_hub import ModelCard

    path = Path(folder) / CARD_NAME
    if not path.is_file():  # ModelCard.load would take the name for a hub repo id
        return None
    meta = ModelCard.load(path, ignore_metadata_errors=True).data.get("flywheel")
    return meta if isinstance(meta, dict) else None


def add_evaluation(folder: Path, evaluation: dict[str, Any]) -> Path | None:
    """Add (or replace) the `evaluation` of the card in `folder`; None when it has no card."""
    meta = read_meta(folder)
    if meta is None:
        return None
    return write_card(folder, {**meta, "evaluation": evaluation})


def add_benchmarks(folder: Path, metrics: dict[str, float | None]) -> Path | None:
    """Add the benchmark figures (`benchmark/<name>/<figure>` metrics of the evaluate stage) to
    the card in `folder`, as {name: {figure: value}}; None when it has no card (a base model
    folder, which the run must not write)."""
    meta = read_meta(folder)
    if meta is None:
        return None
    benchmarks: dict[str, dict[str, float | None]] = {}
    for key, value in metrics.items():
        _, name, figure = key.split("/", 2)
        benchmarks.setdefault(name, {})[figure] = value
    return write_card(folder, {**meta, "benchmarks": benchmarks})
