"""The task runner a run's rounds use (config `[scale]`): Prefect's default, or Ray.

    with scale_session(config.scale) as runner:      # None = Prefect's default runner
        flow = round_flow if runner is None else round_flow.with_options(task_runner=runner)

Under `task_runner = "ray"` the shards of rollout and verify (tasks/shards.py) are
Prefect tasks that prefect-ray's `RayTaskRunner` sends to Ray workers. One Ray session serves the
whole run: a local instance (127.0.0.1 only, no dashboard, `ray_num_cpus` CPUs) is started here
and shut down when the run ends; with `ray_address` the run connects to that cluster and leaves
it running. Each round's runner finds Ray initialised and reuses it. The vLLM engine actors of
`rollout.backend = "vllm"` (models/vllm_actors.py) are started by the first rollout and live as
long as this session: they are stopped when it ends, even where Ray stays up.

Every Ray worker runs its task through Prefect's task engine, which reports to the Prefect API.
Without PREFECT_API_URL each worker would start its own temporary server (69 s instead of 21 s
for six tiny tasks, measured), so the Ray path requires a server; the URL is handed to the
workers through Ray's runtime environment. On a multi-node cluster the workers must reach that
URL, import this package, and see the data root and checkpoints at the same path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from configs import ScaleConfig


class RunnerUnavailable(RuntimeError):
    """The configured task runner cannot run here; the message is one line naming the fix."""


def prefect_api_url() -> str | None:
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url) if url else None


def check_task_runner(scale: ScaleConfig) -> None:
    """Raise `RunnerUnavailable` if `scale.task_runner` cannot run here (before anything runs)."""
    if scale.task_runner != "ray":
        return
    try:
        import prefect_ray  # noqa: F401
        import ray  # noqa: F401
    except ImportError:
        msg = ("scale.task_runner = 'ray' needs the ray extra: pip install -e '.[ray]' "
               "(or set task_runner = 'default')")
        raise RunnerUnavailable(msg) from None
    if prefect_api_url() is None:
        msg = ("scale.task_runner = 'ray' needs a Prefect server, or every Ray worker starts its "
               "own: run `make server` and export the PREFECT_API_URL it prints")
        raise RunnerUnavailable(msg)


def ray_init_kwargs(scale: ScaleConfig) -> dict[str, Any]:
    """`ray.init` arguments: the API URL for the workers; a local instance stays on loopback."""
    env = {"PREFECT_API_URL": prefect_api_url() or ""}
    from prefect.settings import get_current_settings

    key = get_current_settings().api.key
    if key is not None:
        env["PREFECT_API_KEY"] = key.get_secret_value()
    kwargs: dict[str, Any] = {"namespace": "prefect", "runtime_env": {"env_vars": env}}
    if scale.ray_address is not None:
        return {"address": scale.ray_address, **kwargs}
    return {"num_cpus": scale.ray_num_cpus, "include_dashboard": False,
            "_node_ip_address": "127.0.0.1", **kwargs}


@contextmanager
def scale_session(scale: ScaleConfig) -> Iterator[Any]:
    """Yield the task runner for the run's round flows (None = Prefect's default)."""
    if scale.task_runner == "default":
        yield None
        return
    check_task_runner(scale)
    import ray
    from prefect_ray import RayTaskRunner

    started = not ray.is_initialized()
    if started:
        ray.init(**ray_init_kwargs(scale))
    try:
        yield RayTaskRunner(address=scale.ray_address)
    finally:
        from models.vllm_actors import stop_engine_actors

        try:
            stop_engine_actors()  # their GPUs are free after the run, whoever started Ray
        finally:
            if started:
                ray.shutdown()
