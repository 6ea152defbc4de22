"""`[proposer] separate = true`: a second model writes the problems (R-Zero's challenger beside
its solver). Synthesize samples the proposer's checkpoint, the solver's train stage trains the
solver rows only, and `train-proposer` trains the proposer rows into the next round's proposer,
whose model card names the proposer it came from.

The stage graph is checked from the config alone; one run on the tiny CPU model (warm-up plus
one round, a second tiny model of another seed as proposer) checks the data and a resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from configs import load_config
from storage.catalog import Catalog
from tasks.fingerprints import stage_fingerprints, stage_graph
from tasks.model_card import read_meta
from tasks.train import PROPOSER_STAGE, rows_of, trained_roles

SEPARATE = {"proposer.separate": True, "proposer.model.init_seed": 1}
SMALL = {"domain.seed_problems": 40, "domain.heldout_per_level": 3, "synthesize.proposals": 16,
         "rollout.samples_per_problem": 4, "rollout.batch_size": 64, "train.batch_size": 16,
         "train.warmup.max_steps": 3, "train.max_steps": 2, "gates.enabled": False, "rounds": 1,
    "curate.solver_targets": "reference"}  # the barely warmed-up solver trains on references


def test_a_separate_proposer_has_its_own_base_and_train_stage_which_synthesize_reads():
    one = stage_fingerprints(load_config(None))
    two, reads = stage_graph(load_config(None, SEPARATE))
    assert set(two) - set(one) == {("proposer-base", 0), (PROPOSER_STAGE, 0),
                                   (PROPOSER_STAGE, 1)}
    assert reads["synthesize", 1] >= {(PROPOSER_STAGE, 0)}
    assert ("base", 0) not in reads["synthesize", 1]
    assert reads[PROPOSER_STAGE, 1] >= {(PROPOSER_STAGE, 0), ("train", 0), ("curate", 1)}
    assert reads["train", 1] >= {("train", 0), ("curate", 1)}
    assert (PROPOSER_STAGE, 0) not in reads["train", 1]
    # the solver's model and its baseline are the same models either way
    assert one["base", 0] == two["base", 0] and one["baseline", 0] == two["baseline", 0]
    assert two["proposer-base", 0] != two["base", 0]


def test_the_solver_and_the_proposer_split_the_rows_by_role():
    rows = [{"role": "solver", "n": 1}, {"role": "proposer", "n": 2}, {"role": "solver", "n": 3}]

    def trained(stage: str, separate: bool) -> list[int]:
        return [r["n"] for r in rows_of(trained_roles(stage, separate_proposer=separate), rows)]

    assert trained("train", False) == [1, 2, 3]
    assert trained("train", True) == [1, 3]
    assert trained(PROPOSER_STAGE, True) == [2]


@pytest.mark.slow
def test_a_run_with_a_separate_proposer_trains_two_models(tmp_path, prefect_server):
    from flows.run import RunSpec, flywheel_flow

    config = load_config(None, {**SMALL, **SEPARATE})
    spec = RunSpec(data_root=str(tmp_path), run_id="two", config=config)
    flywheel_flow(spec)
    catalog = Catalog(tmp_path)
    stages = {(r["stage"], r["round"]): r["fingerprint"] for r in catalog.query(
        "SELECT stage, round, fingerprint FROM stages WHERE run_id = 'two'"
        " AND status = 'completed'")}
    expected = stage_fingerprints(config)
    assert {s: expected[s] for s in stages} == stages  # the graph is the flow's
    rows = {(r["round"], r["role"]): r["n"] for r in catalog.query(
        "SELECT round, role, count(*) AS n FROM train_rows WHERE run_id = 'two' AND weight > 0"
        " GROUP BY ALL")}
    assert {("proposer-base", 0), (PROPOSER_STAGE, 0), ("train", 0), ("train", 1)} <= set(stages)
    # the proposer trains in a round with proposer rows to train (weight > 0), only then
    assert ((PROPOSER_STAGE, 1) in stages) == ((1, "proposer") in rows)
    checkpoints = {(r["stage"], r["round"]): r for r in catalog.query(
        "SELECT stage, round, fingerprint, path, rows FROM datasets WHERE run_id = 'two'"
        " AND kind = 'checkpoint'")}
    sampled_by = {r["checkpoint"] for r in catalog.query(
        "SELECT DISTINCT checkpoint FROM proposals WHERE run_id = 'two' AND round = 1"
        " AND source = 'proposer'")}
    assert sampled_by == {stages[PROPOSER_STAGE, 0]}  # the proposer wrote round 1's problems
    # round 0: no replay; each model trained on its own role's rows
    assert checkpoints["train", 0]["rows"] == rows[0, "solver"]
    assert checkpoints[PROPOSER_STAGE, 0]["rows"] == rows[0, "proposer"]
    def parent(stage: str, round_index: int) -> str:
        meta = read_meta(tmp_path / checkpoints[stage, round_index]["path"])
        return meta["parent_checkpoint"]["fingerprint"]

    assert parent(PROPOSER_STAGE, 0) == stages["proposer-base", 0]
    assert parent("train", 0) == stages["base", 0]
    if (PROPOSER_STAGE, 1) in stages:
        assert parent(PROPOSER_STAGE, 1) == stages[PROPOSER_STAGE, 0]

    # the audit: which rows each checkpoint saw, and where a proposer row went
    from storage.audit.lineage import lineage
    from storage.audit.snapshot import open_run

    con = open_run(tmp_path, "two")
    for stage, role in (("train", "solver"), (PROPOSER_STAGE, "proposer")):
        seen = lineage(con, checkpoints[stage, 0]["fingerprint"]).rows
        assert {(r["role"], r["rows_selected"]) for r in seen} == {
            (role, rows[0, role]), ({"solver": "proposer"}.get(role, "solver"), 0)}, seen
    proposer_row = catalog.query("SELECT train_row_id FROM train_rows WHERE run_id = 'two'"
                                 " AND round = 0 AND role = 'proposer' LIMIT 1")[0]
    went = [r for r in lineage(con, proposer_row["train_row_id"]).rows
            if r["link"] == "trained into"]
    assert [r["id"] for r in went if r["round"] == 0] == [stages[PROPOSER_STAGE, 0]]
    assert stages["train", 1] not in {r["id"] for r in went}

    before = catalog.query("SELECT count(*) AS n FROM stages WHERE run_id = 'two'")[0]["n"]
    flywheel_flow(spec)  # a resume recomputes nothing
    after = catalog.query("SELECT count(*) AS n FROM stages WHERE run_id = 'two'")[0]["n"]
    assert after == before


def test_a_proposer_folder_that_is_not_a_model_is_refused_before_the_run(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from flows.cli import app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    missing = tmp_path / "no-proposer"
    for path, says in ((missing, "no such folder"),  # a folder, and a hub id not in the cache
                       ("Org/no-such-model", "not a local folder")):
        result = CliRunner().invoke(app, [
            "run", "--data-root", str(tmp_path / "data"), "--run-id", "x",
            "--set", "proposer.separate=true", "--set", f"proposer.model.path={path}"])
        assert result.exit_code == 2, result.output
        assert f"proposer.model.path = '{path}': {says}" in result.output
        assert not (tmp_path / "data" / "runs" / "x").exists()


def test_a_proposer_of_another_tokenizer_is_refused(tmp_path):
    from models.tiny import build_tiny_model
    from tasks.context import Checkpoint, RunContext
    from tasks.incumbent import proposer_base, tokenizer_digest
    from tests.models.chat_model import build_chat_model

    solver = build_tiny_model(tmp_path / "solver", hidden_size=32, num_layers=1, head_dim=8,
                              intermediate_size=32, init_seed=0)
    same = build_tiny_model(tmp_path / "same", hidden_size=64, num_layers=2, head_dim=16,
                            intermediate_size=64, init_seed=5)
    other = build_chat_model(tmp_path / "chat")
    assert tokenizer_digest(solver) == tokenizer_digest(same) != tokenizer_digest(other)
    for folder, refused in ((same, False), (other, True)):
        config = load_config(None, {"proposer.separate": True,
                                    "proposer.model.path": str(folder)})
        ctx = RunContext(data_root=tmp_path / "data", run_id="x", config=config)
        if refused:
            with pytest.raises(ValueError, match="another tokenizer or chat template"):
                proposer_base.fn(ctx, Checkpoint(path=solver, fingerprint="s"))
        else:
            assert proposer_base.fn(ctx, Checkpoint(path=solver, fingerprint="s")).path == same


@pytest.mark.slow
def test_r_zero_s_own_shape_trains_its_challenger_by_grpo_against_the_solver(tmp_path,
                                                                              prefect_server):
    """The r-zero preset with `proposer.separate`: round 1's challenger is trained by GRPO in a
    stage of its own, rewarded by the round's incumbent solver, and writes round 2's problems."""
    from flows.run import RunSpec, flywheel_flow
    from tests.flows.test_presets import OVERRIDES

    config = load_config(Path(__file__).parents[2] / "configs" / "r-zero.toml",
                         {**OVERRIDES, "rounds": 2, "proposer.separate": True})
    flywheel_flow(RunSpec(data_root=str(tmp_path), run_id="rz", config=config))
    catalog = Catalog(tmp_path)
    done = {(r["stage"], r["round"]): r["fingerprint"] for r in catalog.query(
        "SELECT stage, round, fingerprint FROM stages WHERE run_id = 'rz'"
        " AND status = 'completed'")}
    assert {(PROPOSER_STAGE, 0), (PROPOSER_STAGE, 1), ("train", 1)} <= set(done), sorted(done)
    metrics = {(r["stage"], r["name"]) for r in catalog.query(
        "SELECT stage, name FROM metrics WHERE run_id = 'rz' AND round = 1")}
    assert (PROPOSER_STAGE, "proposer_reward_first_quarter") in metrics  # its GRPO pass ran
    assert ("train", "proposer_reward_first_quarter") not in metrics  # not the solver's
    assert ("train", "grpo_reward_first_quarter") in metrics
    sampled_by = {r["checkpoint"] for r in catalog.query(
        "SELECT DISTINCT checkpoint FROM proposals WHERE run_id = 'rz' AND round = 2"
        " AND source = 'proposer'")}
    assert sampled_by == {done[PROPOSER_STAGE, 1]}


def test_a_proposer_folder_without_separate_is_a_config_error():
    from configs import ConfigError

    with pytest.raises(ConfigError, match="proposer.separate = true"):
        load_config(None, {"proposer.model.path": "/models/x"})
    assert load_config(None, {"proposer.model.path": "/models/x",
                              "proposer.separate": True}).proposer.separate
