"""Run compile tasks in spawned worker processes (never forked: a CUDA-initialised parent stays safe).

Workers die with the process that started them: a killed `build` must not leave compilers running for minutes
(each holds ~300 MB). On Linux the kernel sends them SIGKILL (PR_SET_PDEATHSIG); elsewhere, and as a backstop,
a thread notices the parent is gone. Before a build, the staging dirs of builders that died are swept.
On-demand compiles (a model's first step compiles one layer problem's picks at a time) keep their pool
between batches, so each batch does not start processes and import Triton again (_Kept).
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
KEEP_IDLE_S = 60.0        # a kept pool (on-demand compiles) shuts down after this long unused
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
              on_done: Callable[[CompileResult], None] | None = None,
              keep: bool = False) -> list[CompileResult]:
    """Run `tasks` on at most `max_workers` processes; raises CacheError if the cache root is unusable. With
    `keep` (on-demand compiles, one small batch per new problem) the workers stay up for the next batch, so
    a batch does not pay for starting processes and importing Triton again (_Kept)."""
    if not tasks:
        return []
    root = Path(tasks[0].cache_root)
    cache.ensure_root(root)
    for arch in sorted({task.arch for task in tasks}):
        cache.sweep_staging(root, arch)
    workers = max(1, min(max_workers, len(tasks)))
    results: list[CompileResult] = []
    kept = _KEPT.acquire(root, max(1, max_workers)) if keep else None
    pool = kept or _new_pool(root, workers)
    try:
        futures = [pool.submit(run_task, task) for task in tasks]
        for future in as_completed(futures):
            result = future.result()
            _COMPILED[0] += 1
            results.append(result)
            if on_done is not None:
                on_done(result)
    except BaseException:
        if kept:
            _KEPT.discard(pool)
        pool.shutdown(wait=False, cancel_futures=True)   # interrupted: the queued tasks never start
        raise
    if kept:
        _KEPT.release()
    else:
        pool.shutdown()
    return results


def _new_pool(root: Path, workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(str(root / ".triton"), os.getpid()))


class _Kept:
    """The pool that on-demand compiles share: one per cache root and worker limit, started on first use
    (its processes spawn as tasks need them), shut down after KEEP_IDLE_S without a batch, or at once when a
    batch fails (a broken pool is never handed out again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._key: tuple[str, int] | None = None
        self._users = 0
        self._timer: threading.Timer | None = None

    def acquire(self, root: Path, workers: int) -> ProcessPoolExecutor | None:
        """The kept pool for this root and worker limit, or None while another batch uses the kept pool of
        another (the caller then runs a pool of its own)."""
        with self._lock:
            if self._pool is not None and self._key != (str(root), workers):
                if self._users:
                    return None
                self._pool.shutdown(wait=False)
                self._pool = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._pool is None:
                self._pool, self._key = _new_pool(root, workers), (str(root), workers)
            self._users += 1
            return self._pool

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._pool is not None:
                self._timer = threading.Timer(KEEP_IDLE_S, self._expire, args=(self._pool,))
                self._timer.daemon = True
                self._timer.start()

    def discard(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            self._users -= 1
            if self._pool is pool:
                self._pool, self._key = None, None

    def _expire(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is not pool or self._users:
                return
            self._pool, self._key, self._timer = None, None, None
        pool.shutdown(wait=False)

    def alive(self) -> bool:
        """Whether a kept pool is up (tests)."""
        with self._lock:
            return self._pool is not None

    def shutdown(self) -> None:
        """Stop the kept pool now (tests)."""
        with self._lock:
            pool, self._pool, self._key = self._pool, None, None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if pool is not None:
            pool.shutdown(wait=True)


_KEPT = _Kept()
