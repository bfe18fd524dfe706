"""Executors of a sweep's batches: a local pool of supervised worker processes (one per GPU, or N on the CPU
interpreter), and Ray (one task per group of batches, each running such a pool of one worker on the GPU Ray
gives it).

Supervision: a worker announces each pair before touching it. A worker that dies (illegal address, abort)
costs the pair it was on (`runtime_error`); one that stays silent on a pair past the timeout is killed and
the pair is recorded as `timeout`. Either way a new worker takes the rest of the batch.
"""
from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import wait
from typing import Any
from unittest import mock

from tiledispatch.bench.schema import Outcome, make_row, now, problem_from_json
from tiledispatch.bench.worker import Batch, Pair, WorkerSpec, worker_main
from tiledispatch.configs.naming import parse_name
from tiledispatch.errors import TileDispatchError

RowSink = Callable[[list[dict[str, Any]]], None]


class SweepError(TileDispatchError):
    """The sweep itself cannot go on (no worker comes up, Ray is missing)."""


@dataclasses.dataclass(frozen=True)
class PoolOptions:
    timeout_s: float = 120.0          # a pair silent this long is a hang
    startup_s: float = 300.0          # a worker must be ready, and a batch's kernels loaded, this soon
    max_restarts_in_a_row: int = 3    # workers that die before being ready, in a row, stop the sweep


class _Worker:
    def __init__(self, spec: WorkerSpec, env: dict[str, str]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.spec = spec
        self.conn, child = ctx.Pipe()
        # a spawned child takes the environment at start (CUDA_VISIBLE_DEVICES); ours is restored after
        with mock.patch.dict(os.environ, env):
            self.proc = ctx.Process(target=worker_main, args=(child, spec), daemon=True)
            self.proc.start()
        child.close()
        self.started = time.monotonic()
        self.stamp: dict[str, Any] | None = None
        self.batch: Batch | None = None
        self.reported: set[int] = set()
        self.current: int | None = None
        self.loading = False              # between a batch's arrival and its kernels being loaded
        self.since = time.monotonic()

    @property
    def ready(self) -> bool:
        return self.stamp is not None

    def assign(self, batch: Batch) -> None:
        self.batch, self.reported, self.current, self.since = batch, set(), None, time.monotonic()
        self.loading = True
        self.conn.send(batch)

    def remainder(self, skip: int | None) -> Batch | None:
        """The batch's pairs not yet reported (and not `skip`), as a new batch."""
        assert self.batch is not None
        rest = tuple(p for i, p in enumerate(self.batch.pairs) if i not in self.reported and i != skip)
        return dataclasses.replace(self.batch, pairs=rest) if rest else None

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


class LocalPool:
    """Supervised workers, one per device label; batches go to whichever worker is free."""

    def __init__(self, specs: Sequence[tuple[WorkerSpec, dict[str, str]]],
                 options: PoolOptions = PoolOptions()
                 ) -> None:
        self.specs, self.options = list(specs), options
        self.first_ready: float | None = None   # time.monotonic() when the first worker was up

    def run(self, batches: Iterable[Batch], sink: RowSink, advance: Callable[[int], None]) -> None:
        queue = collections.deque(batches)
        workers = [_Worker(spec, env) for spec, env in self.specs]
        failures = [0] * len(workers)
        try:
            while queue or any(w.batch is not None for w in workers):
                for w in workers:
                    if w.ready and w.batch is None and queue:
                        w.assign(queue.popleft())
                ready = wait([w.conn for w in workers] + [w.proc.sentinel for w in workers], timeout=0.5)
                for i, w in enumerate(workers):
                    fresh = (self._drain(w, sink, advance) if (w.conn in ready or w.proc.sentinel in ready)
                             else True)
                    if fresh and self._healthy(w):
                        continue
                    # a closed pipe means the worker is dying even while it is not reaped yet: not a hang
                    hung = fresh and w.proc.is_alive()
                    workers[i] = self._replace(w, hung, queue, sink, advance, failures, i)
        finally:
            for w in workers:
                if w.proc.is_alive() and not w.conn.closed:
                    try:
                        w.conn.send(None)
                    except (BrokenPipeError, OSError):
                        pass
                w.proc.join(2)
                w.kill()

    def _drain(self, w: _Worker, sink: RowSink, advance: Callable[[int], None]) -> bool:
        """Read every pending message; False when the pipe is closed (the worker died)."""
        try:
            while w.conn.poll():
                message = w.conn.recv()
                kind = message[0]
                if kind == "ready":
                    w.stamp = message[1]
                    self.first_ready = self.first_ready or time.monotonic()
                elif kind == "loaded":
                    w.loading, w.since = False, time.monotonic()
                elif kind == "start":
                    w.current, w.since = message[1], time.monotonic()
                elif kind == "row":
                    w.reported.add(message[1])
                    w.current, w.since = None, time.monotonic()
                    sink([message[2]])
                    advance(1)
                elif kind == "done":
                    w.batch, w.current = None, None
        except (EOFError, OSError):
            return False
        return True

    def _healthy(self, w: _Worker) -> bool:
        now = time.monotonic()
        if not w.proc.is_alive():
            return False
        if not w.ready:
            return now - w.started < self.options.startup_s
        if w.loading:   # a batch's kernels being loaded (maybe built): bounded like a start-up
            return now - w.since < self.options.startup_s
        return w.batch is None or now - w.since < self.options.timeout_s

    def _replace(self, w: _Worker, hung: bool, queue: collections.deque, sink: RowSink,
                 advance: Callable[[int], None], failures: list[int], index: int) -> _Worker:
        w.kill()
        if not w.ready:
            failures[index] += 1
            if failures[index] >= self.options.max_restarts_in_a_row:
                raise SweepError(f"sweep worker {w.spec.label} died {failures[index]} times before it was "
                                 f"ready (exit code {w.proc.exitcode})", field="workers")
        else:
            failures[index] = 0
        if w.batch is not None:
            self._record_loss(w, hung, sink, advance, queue)
        return _Worker(w.spec, self.specs[index][1])

    def _record_loss(self, w: _Worker, hung: bool, sink: RowSink, advance: Callable[[int], None],
                     queue: collections.deque) -> None:
        """Rows for what the lost worker was doing; the rest of its batch goes back to the queue's front."""
        assert w.batch is not None and w.stamp is not None
        if w.current is None and w.reported:   # died between pairs (a recorded device fault): nothing lost
            rest = w.remainder(None)
            if rest is not None:
                queue.appendleft(rest)
            return
        if w.current is None:   # lost while loading kernels or preparing inputs: the batch fails as one
            lost = [i for i in range(len(w.batch.pairs)) if i not in w.reported]
            stage = "loading kernels" if w.loading else "preparing the problem"
            reason = (f"worker hung while {stage}" if hung else
                      f"worker died while {stage} (exit code {w.proc.exitcode})")
            status = "timeout" if hung else "runtime_error"
        else:
            lost = [w.current]
            reason = (f"no answer within {self.options.timeout_s:g} s (worker killed)" if hung else
                      f"worker died (exit code {w.proc.exitcode})")
            status = "timeout" if hung else "runtime_error"
        rows = [loss_row(w.batch, w.batch.pairs[i], status, reason, w.stamp) for i in lost]
        sink(rows)
        advance(len(rows))
        if w.current is not None:
            rest = w.remainder(w.current)
            if rest is not None:
                queue.appendleft(rest)


def loss_row(batch: Batch, pair: Pair, status: str, reason: str, stamp: dict[str, Any]) -> dict[str, Any]:
    problem = problem_from_json(batch.problem_json)
    config = None if pair.vendor else parse_name(pair.kernel)
    name = "vendor:unknown" if pair.vendor else pair.kernel
    stamp = {**stamp, "timestamp": now()}
    return make_row(problem, batch.tag, name, config, Outcome(status, reason, pair.padded), stamp)


def local_specs(base: WorkerSpec, gpus: Sequence[int] | None, cpu_workers: int
                ) -> list[tuple[WorkerSpec, dict[str, str]]]:
    """One worker per listed GPU (CUDA_VISIBLE_DEVICES pins it), or `cpu_workers` interpreter workers."""
    if gpus:
        return [(dataclasses.replace(base, label=f"gpu{g}"), {"CUDA_VISIBLE_DEVICES": str(g)}) for g in gpus]
    return [(dataclasses.replace(base, label=f"cpu{i}"), {}) for i in range(max(1, cpu_workers))]
