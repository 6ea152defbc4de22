"""The proposer samples on the `[rollout]` backend (tasks/synthesize.py `propose`), and its
samples record the checkpoint and the backend that drew them.

The transformers tests run here; tests/models/test_vllm_proposer.py runs the same stage on vLLM.
"""

from __future__ import annotations

import pytest

from configs import load_config
from configs.settings import BackendSettings, SynthesizeSettings, stage_settings
from domains.arithmetic import ArithmeticDomain
from models.backends import SamplingParams, make_backend
from models.tiny import build_tiny_model
from storage.datasets import read_rows, to_table
from tasks.fingerprints import stage_fingerprints
from tasks.synthesize import propose, record_sampler

domain = ArithmeticDomain()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random tiny model (head_dim 32: vLLM's CPU attention has no kernel for 16)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=64, num_layers=1,
                            head_dim=32, intermediate_size=64, init_seed=0)


def run_round_1(tmp_path, checkpoint, overrides):
    """synthesize.fn of round 1 on `checkpoint` (no earlier rounds, gates off) -> proposals."""
    from tasks import synthesize as synthesize_module
    from tasks.context import Checkpoint, RunContext

    config = load_config(None, {"synthesize.proposals": 16, "synthesize.max_new_tokens": 6,
                                "gates.enabled": False, "domain.heldout_per_level": 1,
                                **overrides})
    ctx = RunContext(data_root=tmp_path, run_id="propose", config=config)
    ctx.catalog.ensure_run("propose", config.model_dump_json())
    out = synthesize_module.synthesize.fn(ctx, 1, Checkpoint(checkpoint, "ckpt-fp"), [], [])
    return out, read_rows(out.path("proposals"))


def test_propose_samples_exactly_what_the_configured_transformers_backend_samples(tiny):
    backend_settings = BackendSettings.from_config(load_config(None, {"rollout.batch_size": 5}))
    pairs = propose(domain, tiny, count=12, levels=[2, 3], temperature=1.2, max_new_tokens=6,
                    seed=3, backend=backend_settings)
    prompts = [domain.proposer_prompt([2, 3][i % 2]) for i in range(12)]
    backend = make_backend("transformers", tiny, batch_size=5)
    try:
        expected = backend.generate(prompts, SamplingParams(n=1, temperature=1.2,
                                                            max_new_tokens=6, seed=3))
    finally:
        backend.close()
    assert pairs == [(p, out[0].text) for p, out in zip(prompts, expected, strict=True)]
    assert len({text for _, text in pairs}) > 1  # sampled, not one repeated string


def test_proposals_record_the_checkpoint_and_backend_of_proposer_rows_only(tmp_path, tiny):
    out, proposals = run_round_1(tmp_path, tiny, {})
    sampled = [p for p in proposals if p["source"] == "proposer"]
    filled = [p for p in proposals if p["source"] != "proposer"]
    assert len(sampled) == 16 and filled  # the untrained proposer leaves a generator fill
    assert {(p["checkpoint"], p["backend"]) for p in sampled} == {("ckpt-fp", "transformers")}
    assert {(p["checkpoint"], p["backend"]) for p in filled} == {(None, None)}


def test_record_sampler_and_files_without_the_columns():
    rows = [{"source": "proposer"}, {"source": "seed"}, {"source": "generator"}]
    record_sampler(rows, checkpoint="c1", backend="vllm")
    assert [(r["checkpoint"], r["backend"]) for r in rows] == [("c1", "vllm"), (None, None),
                                                               (None, None)]
    # rows written without the two columns (a domain's own tooling, older code) read as null
    row = {"proposal_id": "p", "run_id": "r", "round": 0, "prompt": "<propose>L2:", "text": "1+2",
           "level": 2, "source": "seed", "problem_id": "x", "drop_reason": None}
    assert to_table("proposals", [row]).to_pylist()[0]["backend"] is None


def test_the_sampler_enters_the_synthesize_fingerprint_of_the_proposer_rounds_only():
    default = load_config(None)
    settings = stage_settings(default, "synthesize", 1)
    assert isinstance(settings, SynthesizeSettings)
    assert settings.backend == BackendSettings.from_config(default)
    assert settings.backend.backend == "transformers"
    base = stage_fingerprints(default)
    vllm = load_config(None, {"rollout.backend": "vllm"})
    vllm_settings = stage_settings(vllm, "synthesize", 1)
    assert vllm_settings.backend.backend == "vllm"
    # the backend is the only difference: the rest of the settings are the default's
    assert vllm_settings.model_copy(update={"backend": settings.backend}) == settings
    assert stage_fingerprints(vllm)["synthesize", 1] != base["synthesize", 1]
    bf16 = load_config(None, {"rollout.dtype": "bfloat16"})
    assert stage_settings(bf16, "synthesize", 1).backend.dtype == "bfloat16"
    assert stage_fingerprints(bf16)["synthesize", 1] != base["synthesize", 1]
    # the seed round samples nothing: its settings and fingerprint ignore the backend
    assert "backend" not in type(stage_settings(default, "synthesize", 0)).model_fields
    assert stage_settings(vllm, "synthesize", 0) == stage_settings(default, "synthesize", 0)
    assert stage_fingerprints(vllm)["synthesize", 0] == base["synthesize", 0]
