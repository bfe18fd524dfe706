"""The Ray executor of sweeps (`--executor ray [--address ...]`; Ray is an optional extra).

Batches are grouped into tasks of a few problems; each task asks Ray for one GPU (none on the CPU
interpreter) and runs them in a LocalPool of one supervised worker, so a crashing or hanging kernel costs one
row there too. The driver gathers each task's rows as it finishes and writes them to the one dataset.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from tiledispatch.bench.executors import LocalPool, PoolOptions, SweepError
from tiledispatch.bench.worker import Batch, WorkerSpec


def run_batches(batches: Sequence[Batch], base: WorkerSpec, label: str, options: PoolOptions
                ) -> list[dict[str, Any]]:
    """Body of one Ray task: the batches through a pool of one worker on the device Ray assigned."""
    rows: list[dict[str, Any]] = []
    spec = dataclasses.replace(base, label=label)
    LocalPool([(spec, {})], options).run(batches, rows.extend, lambda n=1: None)
    return rows


def _ray():
    try:
        import ray
    except ImportError:
        raise SweepError("--executor ray needs Ray: pip install 'tiledispatch[ray]'",
                         field="executor") from None
    return ray


def run_on_ray(batches: Sequence[Batch], base: WorkerSpec, cuda: bool, sink: Callable[[list[dict]], None],
               advance: Callable[..., None], options: PoolOptions, address: str | None,
               problems_per_task: int) -> list[str]:
    """Run every batch as Ray tasks; returns the labels of the tasks' workers."""
    ray = _ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        task = ray.remote(num_gpus=1 if cuda else 0, num_cpus=1, max_retries=0)(run_batches)
        groups = [list(batches[i:i + problems_per_task]) for i in range(0, len(batches), problems_per_task)]
        kind = "ray-gpu" if cuda else "ray-cpu"
        pending = {task.remote(group, base, f"{kind}{i}", options): group for i, group in enumerate(groups)}
        labels = [f"{kind}{i}" for i in range(len(groups))]
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                pending.pop(ref)
                rows = ray.get(ref)
                sink(rows)
                advance(len(rows))
        return labels
    finally:
        if started_here:
            ray.shutdown()
