"""Run compile tasks in spawned worker processes (never forked: a CUDA-initialised parent stays safe).

Workers die with the process that started them: a killed `build` must not leave compilers running for minutes
(each holds ~300 MB). On Linux the kernel sends them SIGKILL (PR_SET_PDEATHSIG); elsewhere, and as a backstop,
a thread notices the parent is gone. Before a build, the staging dirs of builders that died are swept.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from tiledispatch.build import cache
from tiledispatch.build.compile import CompileResult, CompileTask, run_task

PR_SET_PDEATHSIG = 1      # <linux/prctl.h>
WATCH_INTERVAL_S = 0.5
_COMPILED = [0]           # compile tasks this process ran (see compilations)


def compilations() -> int:
    """Kernels this process has compiled (attempts, failed ones included) since it started: what a run from a
    bundle (bundle/) proves is zero."""
    return _COMPILED[0]


def _init_worker(triton_cache: str, parent: int) -> None:
    # Kernels are compiled for an explicit target; the interpreter must not capture @triton.jit here,
    # and Triton's own cache lives inside ours so that `cache clear` really makes the next build cold.
    _exit_with_parent(parent)
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = triton_cache


def _exit_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:   # died before the request took effect
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="tiledispatch-parent-watch",
                     daemon=True).start()


def _watch_parent(parent: int) -> None:
    """A thread's check (it runs whenever the compiler lets go of the GIL): an orphan exits at once."""
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_S)
    os._exit(1)


def run_tasks(tasks: Sequence[CompileTask], max_workers: int,
              on_done: Callable[[CompileResult], None] | None = None) -> list[CompileResult]:
    """Run `tasks` on at most `max_workers` processes; raises CacheError if the cache root is unusable."""
    if not tasks:
        return []
    root = Path(tasks[0].cache_root)
    cache.ensure_root(root)
    for arch in sorted({task.arch for task in tasks}):
        cache.sweep_staging(root, arch)
    workers = max(1, min(max_workers, len(tasks)))
    results: list[CompileResult] = []
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(str(root / ".triton"), os.getpid()))
    try:
        futures = [pool.submit(run_task, task) for task in tasks]
        for future in as_completed(futures):
            result = future.result()
            _COMPILED[0] += 1
            results.append(result)
            if on_done is not None:
                on_done(result)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)   # interrupted: the queued tasks never start
        raise
    pool.shutdown()
    return results
