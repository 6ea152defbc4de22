"""Shards of a stage: pieces of its problems, each a Prefect task on the flow's task runner.

    ranges = batch_aligned_ranges(items=1000, per_item=4, batch_size=512, shards=4)
    # [(0, 256), (256, 512), (512, 768), (768, 1000)]   (256 problems x 4 samples = 2 batches)
    parts = map_shards(rollout_shard, [{"problems": rows[a:b], ...} for a, b in ranges],
                       scale=config.scale, stage="rollout")   # lists of rows, in shard order

Rollout and verify split their work with these (config `[scale]`); `run_stage` still writes the
gathered rows as one Parquet file, so the storage contract and the fingerprints do not change.
A shard is `run_shard` submitted to the task runner of the flow run it is called from: Ray
workers under prefect-ray's `RayTaskRunner` (flows/runners.py), all at once. On the
default runner the shards are submitted one after the other, each awaited before the next:
threads of one process must not sample at once (the transformers backend seeds torch's global
generator, and concurrent `from_pretrained` calls leave torch patched: "Cannot copy out of meta
tensor" later, seen here). One shard on the default runner is a plain call, no task: the
default run behaves exactly as before sharding existed.

Why shards start on batch boundaries: the transformers backend seeds and pads per batch of
`rollout.batch_size` sequences, so a shard that starts mid-batch would sample different
completions. Starting every shard at a multiple of the batch (and telling the backend where it
starts, `SamplingParams.first_prompt`) makes the shards' rows identical to the unsharded ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from configs import ScaleConfig


def batch_aligned_ranges(items: int, per_item: int, batch_size: int,
                         shards: int) -> list[tuple[int, int]]:
    """At most `shards` contiguous [start, end) ranges over `items`, each starting on a batch
    boundary of the expanded sequence list (`per_item` sequences per item); never an empty one."""
    if items == 0:
        return [(0, 0)]
    unit = batch_size // math.gcd(batch_size, per_item)  # items per whole number of batches
    units = math.ceil(items / unit)
    count = max(1, min(shards, units))
    bounds = [min(items, (units * k // count) * unit) for k in range(count + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(count)]


def even_ranges(items: int, shards: int) -> list[tuple[int, int]]:
    """At most `shards` contiguous [start, end) ranges of near-equal size; never an empty one."""
    count = max(1, min(shards, items))
    bounds = [items * k // count for k in range(count + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(count)]


def grouped_ranges(keys: list[str], shards: int) -> list[tuple[int, int]]:
    """At most `shards` contiguous [start, end) ranges over `keys` that never split a run of
    equal keys (a problem's rollouts stay in one shard); one range when keys are not grouped."""
    starts = [i for i in range(len(keys)) if i == 0 or keys[i] != keys[i - 1]]
    if len(starts) != len(set(keys)) or not starts:
        return [(0, len(keys))]
    edges = starts + [len(keys)]
    return [(edges[a], edges[b]) for a, b in even_ranges(len(starts), shards)]


@task(name="shard", cache_policy=NONE, persist_result=False)
def run_shard(function: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """One shard: `function(**kwargs)` (a module-level function, so Ray pickles it by name)."""
    return function(**kwargs)


def map_shards(function: Callable[..., list[Any]], shards: list[dict[str, Any]], *,
               scale: ScaleConfig, stage: str,
               progress: Callable[[int], None] | None = None,
               sink: Callable[[list[Any]], None] | None = None) -> list[list[Any]]:
    """`function(**kwargs)` for every shard (each returns a list of rows), in shard order.

    In-process when there is one shard on the default runner or no flow run to submit to (a
    task's `.fn()` in a unit test); otherwise each shard is `run_shard` submitted to the flow
    run's task runner: all at once on Ray, one at a time on the default runner (see the module
    docstring). `progress(rows)`: passed to `function` in-process, else called per shard.
    `sink(rows)`: the same, for rows: in-process `function` hands its rows to it as they are
    made (and returns none), else each shard's rows are handed to it in shard order as that
    shard is done; the shards' results are then not kept (the list returned is empty), so a
    stage writing them holds one shard's rows at a time.
    """
    from prefect.context import FlowRunContext

    local = (len(shards) == 1 and scale.task_runner == "default") or FlowRunContext.get() is None
    if local:
        extra = {name: value for name, value in (("progress", progress), ("sink", sink))
                 if value is not None}
        results = [function(**kwargs, **extra) for kwargs in shards]
        return [] if sink is not None else results
    results: list[list[Any]] = []
    futures = []
    for index, kwargs in enumerate(shards):
        named = run_shard.with_options(name=f"{stage}-shard",
                                       task_run_name=f"{stage}-shard-{index}")
        futures.append(named.submit(function, kwargs))
        if scale.task_runner == "default":
            futures[-1].wait()
    try:
        for future in futures:
            rows = future.result()
            if progress is not None:
                progress(len(rows))
            if sink is not None:
                sink(rows)
            else:
                results.append(rows)
    except BaseException:
        from prefect.futures import wait

        wait(futures)  # the stage fails once, after its other shards ended: none left running
        raise
    return results
