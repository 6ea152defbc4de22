"""Every preset in configs/ (but the defaults, tiny-cpu.toml) runs the domain its name says,
names what it follows and where it departs, and runs end to end on a tiny CPU model, writing
the same catalog and lineage as the default run: the recipes on the built-in tiny model, the
GPU presets (`GPU_PRESETS`) on the tiny random chat model of tests/models/chat_model.py
(qwen-gpu's through a hub id in a hub cache built here), on the CPU.

Each preset runs its warm-up (none under `[warmup] mode = "none"`) plus one round, cut to a few
steps by `load_config` overrides, in process under the session's Prefect server (a slow test:
about a minute of CPU each). New presets are picked up by the glob. Levels are narrowed to 1-2
so that a warm-up of a few dozen steps already solves some problems (otherwise round 1 would
keep nothing and train on nothing); the random chat model solves nothing, so the GPU presets'
rounds train on references (`curate.solver_targets = "reference"`). Data gates are off: their
suites have their own tests (tests/validators) and cost seconds per stage output.

Also here: the baseline knobs the presets and bench/learning.py use (`synthesize.source`,
`curate.solver_targets`), as pure functions.
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from configs import load_config
from domains import get_domain
from storage.catalog import Catalog
from storage.datasets import SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p for p in (ROOT / "configs").glob("*.toml") if p.name != "tiny-cpu.toml")
# a pretrained chat model (tests/configs, tests/models)
GPU_PRESETS = {"qwen-gpu", "gsm8k-style", "meta-rewarding", "evorubric"}
JUDGED_PRESETS = {"meta-rewarding", "evorubric"}  # an LLM judge's rewards
# The domain each preset's name promises (arithmetic where the name is a recipe's only).
DOMAINS = {"absolute-zero": "python_io", "python-io-tiny": "python_io",
           "reasoning-gym-tiny": "reasoning_gym", "gsm8k-style": "dataset",
           "meta-rewarding": "dataset", "evorubric": "dataset"}
ROUND_STAGES = ["synthesize", "rollout", "verify", "curate", "train", "evaluate", "promote"]
OVERRIDES = {"rounds": 1, "domain.seed_problems": 200, "domain.min_level": 1, "domain.max_level": 2,
             "domain.heldout_per_level": 3, "synthesize.proposals": 64,
             "rollout.samples_per_problem": 4,
             "train.batch_size": 32, "train.warmup.max_steps": 60, "train.max_steps": 4,
             "train.proposer.max_steps": 2, "train.proposer.samples": 2,
             "gates.enabled": False}
# absolute-zero's GRPO passes over programs cost minutes at those sizes: half the batch, fewer
# steps. reasoning-gym-tiny: after 60 warm-up steps 4 samples of its 64 problems earn partial
# credit only, and a round's references are budgeted by its fully right samples (verified
# rows), so none trains; 16 samples find a few right ones.
LIGHTER = {"absolute-zero": {"domain.seed_problems": 120, "train.batch_size": 16,
                             "train.max_steps": 2, "train.proposer.max_steps": 1},
           "reasoning-gym-tiny": {"rollout.samples_per_problem": 16}}
# The GPU presets on the CPU and the tiny random chat model: its sizes, the transformers backend,
# float32, and references to train on (it answers nothing right).
CHAT_OVERRIDES = {"rounds": 1, "domain.seed_problems": 40, "domain.heldout_per_level": 3,
                  "synthesize.proposals": 16, "synthesize.max_new_tokens": 12,
                  "rollout.backend": "transformers", "rollout.dtype": "float32",
                  "rollout.samples_per_problem": 2, "rollout.max_new_tokens": 8,
                  "rollout.batch_size": 64, "evaluate.max_new_tokens": 8,
                  "train.device": "cpu", "train.dtype": "float32", "train.batch_size": 8,
                  "train.max_length": 128, "train.warmup.max_steps": 3, "train.max_steps": 2,
                  "curate.solver_targets": "reference", "gates.enabled": False}
HUB_ID = "Qwen/Qwen2.5-1.5B-Instruct"  # qwen-gpu's model, a hub id of the tiny chat model here


def test_presets_exist():
    names = {p.stem for p in PRESETS}
    assert {"rest-em", "r-zero", "absolute-zero", "ttrl", "eva", *GPU_PRESETS} <= names, names


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_preset_runs_the_domain_of_its_name_and_documents_its_sources(path):
    config = load_config(path)
    assert (config.model.path is None) == (path.stem not in GPU_PRESETS), path.name
    assert config.domain.name == DOMAINS.get(path.stem, "arithmetic"), path.name
    head = path.read_text().split("\n\n", 1)[0]  # the comment block the file opens with
    assert head.startswith("#") and "Follows" in head and "Departs" in head, path.name


def test_the_gpu_presets_keep_the_model_s_reasoning():
    modes = {name: load_config(ROOT / "configs" / f"{name}.toml").warmup.mode
             for name in GPU_PRESETS}
    assert modes == {"qwen-gpu": "self_samples", "gsm8k-style": "none", "meta-rewarding": "none",
                     "evorubric": "none"}


def preset_overrides(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The `load_config` overrides that run `path` here: OVERRIDES (and LIGHTER's), or for a GPU
    preset CHAT_OVERRIDES with the tiny chat model as its model (qwen-gpu: as the hub id HUB_ID
    in a hub cache built in tmp_path) and gsm8k-style's files written."""
    if path.stem not in GPU_PRESETS:
        return {**OVERRIDES, **LIGHTER.get(path.stem, {})}
    from tests.models.chat_model import build_chat_model, question_lines
    from tests.models.hub_cache import cache_snapshot

    model = build_chat_model(tmp_path / "chat-model")
    if path.stem == "qwen-gpu":
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        cache_snapshot(tmp_path / "hub-cache", HUB_ID, model)
        return {**CHAT_OVERRIDES, "model.path": HUB_ID}
    lines = question_lines(100, seed=3)
    if path.stem == "meta-rewarding":  # prompts only: the judge and DPO need no answers
        lines = [{"question": r["question"]} for r in lines]
    files = {}
    for name, rows in (("train", lines[:80]), ("test", lines[80:])):
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = {**CHAT_OVERRIDES, "model.path": str(model), "synthesize.proposals": 32,
                 "domain.dataset.paths": [str(files["train"])],
                 "domain.dataset.heldout_path": str(files["test"])}
    if path.stem in JUDGED_PRESETS:  # a scripted judge's graded scores: DPO pairs, GRPO rewards
        judge = build_chat_model(tmp_path / "judge-model")  # its tokenizer renders the prompts
        overrides.update({"curate.solver_targets": "verified", "rollout.samples_per_problem": 4,
                          "verify.judge.model_path": str(judge)})
        judge_with(judge, monkeypatch)
    return overrides


class GradedJudge:
    """A judge backend that scores each prompt 1-10 by a hash of its text (graded rewards, the
    same for the same prompt), as a judge model's replies would."""

    def generate(self, prompts, params, progress=None):
        from models.rollout_types import Completion

        return [[Completion(text=str(1 + zlib.crc32(p.encode()) % 10), tokens=1)]
                for p in prompts]

    def close(self):
        pass


def judge_with(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's judge, loaded from `folder`, answers through `GradedJudge`; every other backend
    (the run's sampler) is the model's."""
    from models import backends

    real = backends.make_backend

    def make_backend(name, checkpoint, **options):
        return GradedJudge() if Path(checkpoint) == folder else real(name, checkpoint, **options)

    monkeypatch.setattr(backends, "make_backend", make_backend)


@pytest.mark.slow
@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_preset_runs_end_to_end_with_catalog_and_lineage(path, tmp_path, prefect_server,
                                                        monkeypatch):
    from flows.run import RunSpec, flywheel_flow
    from storage.audit.lineage import lineage
    from storage.audit.snapshot import open_run

    config = load_config(path, preset_overrides(path, tmp_path / "inputs", monkeypatch))
    run_id = path.stem
    data_root = tmp_path / "data"
    flywheel_flow(RunSpec(data_root=str(data_root), run_id=run_id, config=config))
    catalog = Catalog(data_root)

    # a completed row per stage per round (a round without training rows: no train or evaluate
    # stage, recorded as rejected with its reason; without a warm-up round 0 is a promote only),
    # every round decided, the run completed
    first = config.warmup.first_round
    decided = catalog.query("SELECT round, candidate, promoted, reason FROM rounds WHERE run_id = ?"
                            " ORDER BY round", [run_id])
    assert [r["round"] for r in decided] == list(range(config.rounds + 1))
    untrained = {r["round"] for r in decided if r["candidate"] is None}
    assert all(not r["promoted"] and r["reason"]
               for r in decided if r["round"] in untrained), decided
    assert untrained == set(range(first)), (f"rounds {untrained} trained on nothing:"
                                            " these sizes must exercise training")
    rows = catalog.query("SELECT round, stage, status FROM stages WHERE run_id = ?", [run_id])
    assert all(r["status"] == "completed" for r in rows), rows
    base = [(0, "base")] if config.model.path is None else []  # a model folder is no stage
    expected = sorted([*base, (0, "baseline")] + [(0, "promote")] * first + [
        (n, s) for n in range(first, config.rounds + 1) for s in ROUND_STAGES])
    assert sorted((r["round"], r["stage"]) for r in rows) == expected
    assert (catalog.query("SELECT status FROM runs WHERE run_id = ?", [run_id])[0]["status"]
            == "completed")

    # every dataset has its kind's documented columns and types, and its recorded row count
    files = catalog.query("SELECT kind, path, rows FROM datasets"
                          " WHERE run_id = ? AND kind != 'checkpoint'", [run_id])
    judged = path.stem in JUDGED_PRESETS  # judgements are written only where a model judges
    assert {f["kind"] for f in files} == set(SCHEMAS) - (set() if judged else {"judgements"})
    for f in files:
        f["path"] = catalog.resolve(f["path"])
        schema = pq.read_schema(f["path"])
        assert schema.names == SCHEMAS[f["kind"]].names, f["path"]
        assert [t.type for t in schema] == [t.type for t in SCHEMAS[f["kind"]]], f["path"]
        assert pq.ParquetFile(f["path"]).metadata.num_rows == f["rows"]

    if path.stem in JUDGED_PRESETS:  # every judge call stored, with its criteria under rubrics
        judged = catalog.query("SELECT count(*) AS n, count(rubric) AS rubrics FROM judgements"
                               " WHERE run_id = ? AND round = 1", [run_id])[0]
        assert judged["n"] > 0
        assert judged["rubrics"] == (judged["n"] if config.verify.judge.rubrics else 0)

    # round 1's problems come from the preset's source; a trained row leads back to them
    sources = {r["source"] for r in catalog.query(
        "SELECT DISTINCT source FROM problems WHERE run_id = ? AND round = 1", [run_id])}
    if config.domain.name == "arithmetic" and config.model.path is None:
        assert sources == {config.synthesize.source}
    else:  # a few dozen warm-up steps write no valid program yet: the top-up source fills in
        assert sources <= {config.synthesize.source, config.synthesize.top_up}, sources
    last = max(set(range(config.rounds + 1)) - untrained)  # the last round that trained
    trained = catalog.query(
        "SELECT train_row_id, role, rollout_id FROM train_rows WHERE run_id = ? AND round = ?"
        " AND role = 'solver' ORDER BY train_row_id LIMIT 1", [run_id, last])
    assert trained, f"round {last} trained on no solver rows"
    # the preset's training algorithms ran: GRPO logged rewards (the proposer's too, where it is
    # trained by GRPO), DPO trained on pairs
    train_metrics = {r["name"] for r in catalog.query(
        "SELECT name FROM metrics WHERE run_id = ? AND round = 1 AND stage = 'train'", [run_id])}
    assert (("grpo_reward_first_quarter" in train_metrics)
            == (config.train.algorithm == "grpo")), train_metrics
    proposer_grpo = config.train.proposer.algorithm == "grpo"
    assert ("proposer_reward_first_quarter" in train_metrics) == proposer_grpo, train_metrics
    pairs = catalog.query("SELECT count(*) AS n FROM train_rows WHERE run_id = ? AND round = 1"
                          " AND rejected IS NOT NULL", [run_id])[0]["n"]
    assert (pairs > 0) == (config.train.algorithm == "dpo"), pairs
    con = open_run(data_root, run_id)
    try:
        chain = lineage(con, trained[0]["train_row_id"])
        kinds = [r["kind"] for r in chain.rows]
        # SFT and DPO rows name the answer they train on; GRPO and reference rows only a problem;
        # "rationalize" trains too-hard problems on references and the rest on verified answers
        answered = config.train.algorithm != "grpo" and config.curate.solver_targets == "verified"
        if config.curate.solver_targets != "rationalize" or last == 0:
            assert (trained[0]["rollout_id"] is not None) == (last > 0 and answered), trained
        head = ["train_row", "rollout", "verdict"] if trained[0]["rollout_id"] else ["train_row"]
        assert kinds[:len(head)] == head, kinds
        assert ["problem", "curriculum", "proposal", "model"] == [
            k for k in kinds if k in ("problem", "curriculum", "proposal", "model")][:4], kinds
        writer = next(r for r in chain.rows if r["kind"] == "model")
        # the generator wrote it, not a model
        if last > 0 and config.synthesize.source != "proposer":
            assert writer["id"] == config.synthesize.source, writer
        checkpoint = catalog.resolve(catalog.query(
            "SELECT path FROM datasets WHERE run_id = ? AND round = ? AND kind = 'checkpoint'"
            " AND stage = 'train'", [run_id, last])[0]["path"])
        seen = lineage(con, checkpoint)
        assert not any("could not be reproduced" in note for note in seen.notes), seen.notes
        relations = {(r["round"], r["relation"]) for r in seen.rows}
        assert (last, "this round") in relations, relations
        if last > first and config.train.replay_ratio > 0:
            assert (first, "replayed") in relations, relations
        assert all(r["rows_selected"] is not None for r in seen.rows)
    finally:
        con.close()


# ---- the baseline knobs ----------------------------------------------------------------------


def test_generator_source_draws_fresh_uniform_levels_and_pool_repeats():
    from tasks.synthesize import baseline_proposals

    domain = get_domain("arithmetic")
    kwargs = {"count": 300, "levels": [2, 3, 4], "pool_seed": 7}
    first = baseline_proposals(domain, "generator", round_seed=1, **kwargs)
    second = baseline_proposals(domain, "generator", round_seed=2, **kwargs)
    levels = [domain.parse(text).level for _, text in first]
    assert {level: levels.count(level) for level in set(levels)} == {2: 100, 3: 100, 4: 100}
    assert [t for _, t in first] != [t for _, t in second]  # fresh problems every round
    pool_a = baseline_proposals(domain, "pool", round_seed=1, **kwargs)
    pool_b = baseline_proposals(domain, "pool", round_seed=2, **kwargs)
    assert pool_a == pool_b  # the same prompt set every round


def _round(solver_targets: str):
    from tasks.curate import curriculum_rows, training_rows

    domain = get_domain("arithmetic")
    band = load_config(None, {"curate.solver_targets": solver_targets}).curate
    rng = random.Random(0)
    problems, rollouts, verdicts = [], [], []
    for index, reward_pattern in enumerate([(0, 0), (1, 0), (1, 1)]):
        problem = domain.generate(rng, 2)
        pid = f"p{index}"
        problems.append({"problem_id": pid, "run_id": "r", "round": 1, "text": problem.text,
                         "reference": problem.reference, "level": 2, "source": "generator",
                         "proposal_id": f"q{index}"})
        for sample, reward in enumerate(reward_pattern):
            rid = f"{pid}-{sample}"
            answer = problem.reference if reward else "x"
            rollouts.append({"rollout_id": rid, "problem_id": pid, "sample_index": sample,
                             "prompt": domain.solver_prompt(problem.text), "completion": answer})
            verdicts.append({"rollout_id": rid, "problem_id": pid, "reward": float(reward)})
    curriculum = curriculum_rows(problems, verdicts, band, warmup=False)
    rows = training_rows(domain, problems, rollouts, verdicts, curriculum, band, warmup=False)
    return problems, curriculum, [r for r in rows if r["role"] == "solver"]


def test_verified_targets_keep_the_band_and_train_on_verified_answers():
    _, curriculum, solver = _round("verified")
    assert [c["drop_reason"] for c in curriculum] == ["too_hard", None, "too_easy"]
    assert [(r["problem_id"], r["rollout_id"]) for r in solver] == [("p1", "p1-0")]


def test_reference_targets_keep_every_problem_and_train_on_its_reference():
    problems, curriculum, solver = _round("reference")
    assert all(c["kept"] and c["drop_reason"] is None for c in curriculum)
    assert [c["pass_rate"] for c in curriculum] == [0.0, 0.5, 1.0]  # still measured
    assert [(r["problem_id"], r["completion"], r["rollout_id"]) for r in solver] == [
        (p["problem_id"], p["reference"], None) for p in problems]
