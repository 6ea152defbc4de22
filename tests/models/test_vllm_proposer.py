"""The proposer on vLLM for real (`make test-vllm`): synthesize's samples come from the warm
engine, record `backend = "vllm"`, and the next stage on the same checkpoint reuses the engine."""

from __future__ import annotations

import pytest

from configs import load_config
from domains.arithmetic import ArithmeticDomain
from models.backends import SamplingParams, backend_for
from tests.models.test_proposer_sampling import run_round_1, tiny  # noqa: F401  (fixture)

domain = ArithmeticDomain()


@pytest.mark.vllm
def test_synthesize_samples_the_proposer_on_the_warm_vllm_engine(tmp_path, tiny):  # noqa: F811
    from models.vllm_backend import ENGINES

    ENGINES.shutdown()
    builds, swaps = ENGINES.builds, ENGINES.swaps
    out, proposals = run_round_1(tmp_path, tiny, {"rollout.backend": "vllm"})
    assert ENGINES.builds - builds == 1  # the stage started the process's engine
    sampled = [p for p in proposals if p["source"] == "proposer"]
    assert len(sampled) == 16
    assert {(p["checkpoint"], p["backend"]) for p in sampled} == {("ckpt-fp", "vllm")}

    # the same samples straight from the engine, which the stage left warm: no second start,
    # no weight swap (same checkpoint)
    config = load_config(None, {"rollout.backend": "vllm"})
    backend = backend_for(config.rollout, tiny)
    try:
        outputs = backend.generate([p["prompt"] for p in sampled],
                                   SamplingParams(n=1, temperature=config.synthesize.temperature,
                                                  max_new_tokens=6, seed=_proposer_seed()))
    finally:
        backend.close()
    assert ENGINES.builds - builds == 1 and ENGINES.swaps == swaps
    assert [p["text"] for p in sampled] == [o[0].text for o in outputs]
    ENGINES.shutdown()


def _proposer_seed() -> int:
    """The seed of round 1's first proposer batch (run seed 0)."""
    from storage.seeds import stage_seed

    return stage_seed(0, "synthesize", 1)
