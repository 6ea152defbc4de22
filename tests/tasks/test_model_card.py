"""Checkpoint provenance without training a model: the train stage (a fake trainer) writes a model
card that `huggingface_hub.ModelCard.load` reads, with the Hub's `base_model` (the run's starting
model), `datasets` (the training rows' fingerprints) and, once promote evaluated it,
`model-index`; its `flywheel` metadata names run, round, parent, lineage and data; the same
inputs give the same bytes; and checkpoint files are readable (safetensors' 0600 weights and
mkdtemp's 0700 folder are opened up)."""

from __future__ import annotations

import stat

import pytest
from huggingface_hub import ModelCard

from configs import load_config
from configs.settings import WarmupTrainSettings
from models import trainer
from models.trainer import TrainResult
from storage.datasets import dataset_path, write_atomic
from storage.permissions import process_umask
from tasks.context import Checkpoint, RunContext
from tasks.evaluate import Evaluation
from tasks.model_card import card_text, checkpoint_meta, hub_id, read_meta, write_card
from tasks.promote import promote
from tasks.stage import StageOutput, settings_fingerprint
from tasks.train import VERSION, train, train_settings


def _eval_rows(checkpoint: str, marks: list[bool]) -> list[dict]:
    return [{"run_id": "r", "round": 0, "checkpoint": checkpoint, "item_id": f"i{i}", "level": 1,
             "prompt": f"<solve>{i}+1=", "completion": "x", "answer": "x", "reference": "y",
             "correct": ok} for i, ok in enumerate(marks)]


@pytest.fixture
def trained(tmp_path, monkeypatch):
    """(ctx, the incumbent, the curate output, the candidate) after a fake training."""
    config = load_config(None, {"rounds": 0, "gates.enabled": False})
    ctx = RunContext(data_root=tmp_path, run_id="r", config=config)
    rows = [{"train_row_id": f"t{i}", "run_id": "r", "round": 0, "role": "solver",
             "prompt": f"<solve>{i}+1=", "completion": str(i + 1), "rejected": None, "weight": 1.0,
             "problem_id": f"p{i}", "rollout_id": None, "proposal_id": f"q{i}"} for i in range(8)]
    path = write_atomic("train_rows", rows,
                        dataset_path(tmp_path, "r", 0, "train_rows", "a" * 32)).path
    curated = StageOutput("curate", 0, "a" * 32, {"train_rows": path}, skipped=False)
    incumbent = Checkpoint(path=ctx.run_dir / "round-000" / "checkpoint-bbbbbbbbbbbb",
                           fingerprint="b" * 32)
    incumbent.path.mkdir(parents=True)  # the base stage's tiny model and its card
    write_card(incumbent.path, checkpoint_meta(ctx, stage="base", round_index=0,
                                               fingerprint="b" * 32,
                                               config={"hidden_size": 64, "num_layers": 2}))

    def fake_train_sft(**kwargs):
        out = kwargs["out_dir"]
        out.mkdir(parents=True, mode=0o700)
        weights = out / "model.safetensors"
        weights.write_bytes(b"weights")
        weights.chmod(0o600)  # as safetensors writes it
        return TrainResult(steps=1, final_loss=1.0, mean_loss=1.0, trained_tokens=8)

    monkeypatch.setattr(trainer, "train_sft", fake_train_sft)
    return ctx, incumbent, curated, train.fn(ctx, 0, incumbent, curated, [])


def test_a_trained_checkpoint_carries_a_model_card_and_is_readable(trained):
    ctx, incumbent, curated, candidate = trained
    card = ModelCard.load(candidate.path / "README.md")
    meta = card.data.to_dict()["flywheel"]
    assert meta["run_id"] == "r" and meta["round"] == 0 and meta["stage"] == "train"
    assert meta["fingerprint"] == candidate.fingerprint
    assert meta["parent_checkpoint"] == {"fingerprint": "b" * 32,
                                         "folder": "round-000/checkpoint-bbbbbbbbbbbb"}
    assert meta["data"] == {"train_rows": curated.fingerprint} and meta["training_rows"] == 8
    # the config is the stage's whole settings object (round 0: WarmupTrainSettings), so the
    # card's config, seed and data reproduce the folder's fingerprint
    settings = train_settings(ctx.config, 0)
    assert meta["config"] == settings.model_dump(mode="json")
    assert meta["config"]["batch_size"] == ctx.config.train.batch_size
    assert meta["config"]["warmup"] == ctx.config.train.warmup.model_dump(mode="json")
    assert meta["config"]["domain"]["domain"]["name"] == ctx.config.domain.name
    assert "grpo" not in meta["config"] and "save_steps" not in meta["config"]
    assert WarmupTrainSettings.model_validate(meta["config"]) == settings
    assert settings_fingerprint("train", VERSION, WarmupTrainSettings.model_validate(
        meta["config"]), meta["seed"], {"checkpoint": meta["parent_checkpoint"]["fingerprint"],
                                        **meta["data"]}) == candidate.fingerprint
    assert "round 0 of run `r`" in card.text
    # the Hub's keys: the run's starting model (the tiny model the base stage built), the data
    assert card.data.base_model == meta["base_model"] == \
        "flywheel tiny Llama (hidden_size 64, num_layers 2)"
    assert card.data.datasets == [curated.fingerprint]
    assert card.data.eval_results is None, "no model-index before promote evaluated it"
    assert meta["lineage"] == [{"round": 0, "stage": "base", "fingerprint": "b" * 32,
                                "folder": "round-000/checkpoint-bbbbbbbbbbbb"}]
    assert "| 0 | base | `round-000/checkpoint-bbbbbbbbbbbb` | - | - | - |" in card.text
    assert "| 0 | train | this checkpoint | 8 | - | - |" in card.text
    text = (candidate.path / "README.md").read_text()
    assert str(ctx.data_root) not in text, "no absolute path: a moved data root keeps its cards"

    mask = process_umask()
    assert stat.S_IMODE(candidate.path.stat().st_mode) == 0o777 & ~mask
    for name in ("model.safetensors", "README.md"):
        assert stat.S_IMODE((candidate.path / name).stat().st_mode) == 0o666 & ~mask, name


def test_promote_adds_the_held_out_accuracy_and_decision_to_the_card(trained, tmp_path):
    ctx, incumbent, _, candidate = trained
    before = (candidate.path / "README.md").read_bytes()
    evals = {}
    for name, fingerprint, marks in (("candidate", "c" * 32, [True, True, True, False]),
                                     ("incumbent", "d" * 32, [True, False, False, False])):
        path = write_atomic("evals", _eval_rows(name, marks),
                            dataset_path(tmp_path, "r", 0, "evals", fingerprint)).path
        figures = {"accuracy": sum(marks) / 4}
        if name == "candidate":  # the evaluate stage's interval reaches the card
            figures |= {"accuracy_low": 0.3, "accuracy_high": 0.95}
        evals[name] = Evaluation(figures, path, fingerprint)
    winner = promote.fn(ctx, 0, incumbent, evals["incumbent"], candidate, evals["candidate"])
    assert winner == candidate
    meta = ModelCard.load(candidate.path / "README.md").data.to_dict()["flywheel"]
    assert meta["evaluation"] == {
        "heldout_accuracy": 0.75, "evals": "c" * 32, "incumbent": "b" * 32,
        "incumbent_accuracy": 0.25, "promoted": True,
        "reason": "accuracy 0.750 >= 0.250 - 0.000",
        "heldout_accuracy_low": 0.3, "heldout_accuracy_high": 0.95}
    assert meta["data"] == read_meta(candidate.path)["data"], "the training provenance stays"
    assert before != (candidate.path / "README.md").read_bytes()
    card = ModelCard.load(candidate.path / "README.md")
    (result,) = card.data.eval_results  # model-index, as the Hub reads it
    assert (result.metric_type, result.metric_value, result.dataset_split) == (
        "accuracy", 0.75, "heldout")
    assert result.dataset_name == "arithmetic held-out set"
    assert result.metric_args == {"interval": [0.3, 0.95]}
    assert card.data.model_name == "flywheel r round 0"
    assert card.data.base_model.startswith("flywheel tiny Llama")
    assert "| 0 | train | this checkpoint | 8 | 0.750 | promoted |" in card.text


def test_the_next_checkpoint_carries_the_lineage_and_an_interval_reaches_the_model_index(
        trained):
    ctx, _, curated, candidate = trained
    from tasks.model_card import add_evaluation

    add_evaluation(candidate.path, {
        "heldout_accuracy": 0.5, "evals": "c" * 32, "incumbent": "b" * 32,
        "incumbent_accuracy": 0.25, "promoted": True, "reason": "accuracy 0.500 >= 0.250 - 0.000",
        "heldout_accuracy_low": 0.25, "heldout_accuracy_high": 0.75})
    meta = checkpoint_meta(ctx, stage="train", round_index=1, fingerprint="f" * 32, config={},
                           parent=candidate, data={"train_rows": "e" * 32}, rows=3)
    assert meta["base_model"].startswith("flywheel tiny Llama"), "the run's, not the parent's"
    assert [(e["round"], e["stage"], e.get("heldout_accuracy"), e.get("promoted"))
            for e in meta["lineage"]] == [(0, "base", None, None), (0, "train", 0.5, True)]
    assert meta["lineage"][1]["training_rows"] == 8
    (result,) = ModelCard.load(candidate.path / "README.md").data.eval_results
    assert result.metric_args == {"interval": [0.25, 0.75]}


def test_a_local_or_hub_model_is_the_base_model(tmp_path):
    config = load_config(None, {"rounds": 0, "gates.enabled": False})
    ctx = RunContext(data_root=tmp_path / "data", run_id="r", config=config)
    local = Checkpoint(path=tmp_path / "models" / "qwen", fingerprint="a" * 32)
    cached = Checkpoint(path=tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots"
                        / "0123abcd", fingerprint="c" * 32)
    for parent, expected in ((local, str(local.path)), (cached, "Qwen/Qwen2.5-0.5B-Instruct")):
        meta = checkpoint_meta(ctx, stage="train", round_index=0, fingerprint="f" * 32,
                               config={}, parent=parent, data={"train_rows": "e" * 32}, rows=1)
        assert meta["base_model"] == expected
        assert meta["lineage"] == [{"round": None, "stage": "model.path",
                                    "fingerprint": parent.fingerprint,
                                    "folder": str(parent.path)}]
    assert hub_id(tmp_path / "models--") is None and hub_id(local.path) is None


def test_the_card_is_deterministic_and_reads_back():
    meta = {"run_id": "r", "round": 2, "stage": "train", "fingerprint": "f" * 32,
            "parent_checkpoint": {"fingerprint": "e" * 32, "folder": "round-001/checkpoint-e"},
            "data": {"train_rows": "a" * 32}, "training_rows": 3, "seed": 7,
            "config": {"train": {"learning_rate": 0.001, "note": "ünïcode: yes"}}}
    assert card_text(meta) == card_text(dict(meta))
    first = card_text(meta)
    assert first.startswith("---\n") and "\n---\n" in first
    import yaml

    header = yaml.safe_load(first.split("---\n")[1])
    assert header["flywheel"] == meta and header["library_name"] == "transformers"


def test_promote_with_a_paired_test_records_difference_interval_and_p(trained, tmp_path):
    _, incumbent, _, candidate = trained
    ctx = RunContext(data_root=tmp_path, run_id="r", config=load_config(
        None, {"rounds": 0, "gates.enabled": False, "promote.test": "mcnemar"}))
    evals = {}
    for name, fingerprint, marks in (("candidate", "c" * 32, [True, True, True, False]),
                                     ("incumbent", "d" * 32, [True, False, False, False])):
        path = write_atomic("evals", _eval_rows(name, marks),
                            dataset_path(tmp_path, "r", 0, "evals", fingerprint)).path
        evals[name] = Evaluation({"accuracy": sum(marks) / 4}, path, fingerprint)
    # +0.500 on 4 items: 2 discordant items, p = 1/4, so the incumbent stays
    assert promote.fn(ctx, 0, incumbent, evals["incumbent"], candidate,
                      evals["candidate"]) == incumbent
    metrics = {m["name"]: m["value"] for m in ctx.catalog.query(
        "SELECT name, value FROM metrics WHERE run_id = 'r' AND stage = 'promote'")}
    assert metrics["promoted"] == 0.0 and metrics["accuracy_difference"] == 0.5
    assert metrics["p_value"] == 0.25
    assert metrics["accuracy_difference_low"] < 0.5 < metrics["accuracy_difference_high"]
    reason = ctx.catalog.query("SELECT reason FROM rounds WHERE run_id = 'r'")[0]["reason"]
    assert reason.startswith("accuracy 0.750 vs 0.250: +0.500 [")
    assert reason.endswith("p = 0.250 > 0.050 (McNemar exact, 4 items, 90% interval)")
