"""Run compile tasks in spawned worker processes (never forked: a CUDA-initialised parent stays safe)."""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from tiledispatch.build.compile import CompileResult, CompileTask, run_task


def _init_worker(triton_cache: str) -> None:
    # Kernels are compiled for an explicit target; the interpreter must not capture @triton.jit here,
    # and Triton's own cache lives inside ours so that `cache clear` really makes the next build cold.
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = triton_cache


def run_tasks(tasks: Sequence[CompileTask], max_workers: int,
              on_done: Callable[[CompileResult], None] | None = None) -> list[CompileResult]:
    if not tasks:
        return []
    triton_cache = str(Path(tasks[0].cache_root) / ".triton")
    workers = max(1, min(max_workers, len(tasks)))
    results: list[CompileResult] = []
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(triton_cache,)) as pool:
        futures = [pool.submit(run_task, task) for task in tasks]
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            if on_done is not None:
                on_done(result)
    return results
