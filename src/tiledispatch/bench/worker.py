"""A sweep worker: a spawned process that owns one device and measures the batches its supervisor sends.

Messages to the supervisor (over a duplex pipe): ("ready", stamp) once the device is up; ("loaded", batch_id)
once a batch's kernels are loaded (loading is bounded like a start-up, not by the per-pair timeout); per pair
("start", index) before it is touched and ("row", index, row) after; ("done", batch_id) after a batch. A pair
that crashes the process or never answers is therefore known to the supervisor, which records it and starts a
new worker for the rest of the batch. Importing this module does no work.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import platform
import sys
import traceback
from typing import Any

from tiledispatch.bench.schema import SCHEMA_VERSION, Outcome, make_row, now, problem_from_json
from tiledispatch.bench.timer import StopRule, SweepTimer


@dataclasses.dataclass(frozen=True)
class Pair:
    """One kernel of a batch: its name (or the vendor label request) and whether it runs on padded
    operands."""

    kernel: str
    padded: bool = False
    vendor: bool = False


@dataclasses.dataclass(frozen=True)
class Batch:
    """Kernels to measure on one problem (inputs and reference are made once for all of them)."""

    batch_id: int
    problem_json: str
    tag: str
    pairs: tuple[Pair, ...]


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    arch: str
    cuda: bool
    sweep_id: str
    label: str                       # which device, for the `worker` column ("gpu0", "cpu1", ...)
    seed: int = 0
    rule: tuple = ()                 # StopRule fields (empty: the default for the device)
    setup: str | None = None         # "module:function" called with the worker's kernel map (fault planting)


def worker_main(conn: Any, spec: WorkerSpec) -> None:
    """Entry point of the spawned process. Any error ends the process at once (a CUDA context or a pipe
    left behind could keep a failing process alive); the supervisor records the pair it was on."""
    try:
        _serve(conn, spec)
    except BaseException:   # noqa: BLE001 - reported on stderr, then the supervisor takes over
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def _serve(conn: Any, spec: WorkerSpec) -> None:
    import torch

    device = torch.device("cuda", 0) if spec.cuda else torch.device("cpu")
    if spec.cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    stamp = device_stamp(device, spec)
    runner = _Runner(spec, device, stamp)
    conn.send(("ready", stamp))
    while True:
        batch = conn.recv()
        if batch is None:
            return
        runner.run(batch, conn)


def device_stamp(device: Any, spec: WorkerSpec) -> dict[str, Any]:
    """The stamp columns of every row this worker writes."""
    import torch
    import triton

    from tiledispatch.version import __version__

    cuda = device.type == "cuda"
    props = torch.cuda.get_device_properties(device) if cuda else None
    return {"gpu": props.name if cuda else "cpu (Triton interpreter)", "arch": spec.arch,
            "sm_count": props.multi_processor_count if cuda else None, "sm_clock_mhz": _clock(props),
            "mem_clock_mhz": _clock(props, "memory_clock_rate"), "tiledispatch": __version__,
            "triton": triton.__version__, "torch": torch.__version__, "cuda": torch.version.cuda,
            "schema_version": SCHEMA_VERSION, "sweep_id": spec.sweep_id, "worker": spec.label,
            "python": platform.python_version()}


def _clock(props: Any, name: str = "clock_rate") -> float | None:
    """A clock of the device properties in MHz (torch reports kHz), None where torch does not expose it."""
    value = getattr(props, name, None) if props is not None else None
    return value / 1000.0 if isinstance(value, (int, float)) and value > 0 else None


class _Runner:
    def __init__(self, spec: WorkerSpec, device: Any, stamp: dict[str, Any]) -> None:
        from tiledispatch.registry.registry import Registry

        self.spec, self.device, self.stamp = spec, device, stamp
        self.registry = Registry(spec.arch)
        rule = StopRule(*spec.rule) if spec.rule else (StopRule() if spec.cuda else CPU_RULE)
        self.timer = SweepTimer(device, rule)
        self.kernels: dict[str, Any] = {}
        self._setup = _resolve(spec.setup) if spec.setup else None

    def load(self, names: list[str]) -> None:
        """Load the kernels not loaded yet from the build cache: one registry build per batch that brings new
        ones (the sweep built them all before measuring), then the setup hook."""
        new = [name for name in dict.fromkeys(names) if name not in self.kernels]
        if not new:
            return
        for name in new:
            self.kernels[name] = self.registry.add(name)
        self.registry.build(max_workers=1, progress=False)
        missing = [name for name in new if not self.kernels[name].built]
        if missing:
            raise RuntimeError(f"{missing} not in the build cache (the sweep builds before measuring)")
        if self._setup is not None:
            self._setup(self.kernels)

    def run(self, batch: Batch, conn: Any) -> None:
        from tiledispatch.bench.measure import DeviceFault, ProblemBench, measure_kernel, measure_vendor

        self.load([pair.kernel for pair in batch.pairs if not pair.vendor])
        conn.send(("loaded", batch.batch_id))
        problem = problem_from_json(batch.problem_json)
        bench = ProblemBench(problem, self.device, self.spec.seed)
        for index, pair in enumerate(batch.pairs):
            conn.send(("start", index))
            stamp = {**self.stamp, "timestamp": now()}
            if pair.vendor:
                label, outcome = measure_vendor(bench, self.timer)
                conn.send(("row", index,
                           make_row(problem, batch.tag, f"vendor:{label}", None, outcome, stamp)))
                continue
            kernel = self.kernels[pair.kernel]
            try:
                outcome = measure_kernel(bench, kernel, pair.padded, self.timer)
            except DeviceFault as fault:
                row = make_row(problem, batch.tag, kernel.name, kernel.config,
                               Outcome("runtime_error", str(fault), pair.padded), stamp)
                conn.send(("row", index, row))
                os._exit(3)   # the CUDA context is unusable: the supervisor starts a new worker for the rest
            conn.send(("row", index,
                       make_row(problem, batch.tag, kernel.name, kernel.config, outcome, stamp)))
        conn.send(("done", batch.batch_id))


def _resolve(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


# The interpreter is ~10^4 times slower than the GPU: the first run is the validation, then 3 samples.
CPU_RULE = StopRule(warmup=0, chunk=1, min_samples=3, max_samples=3, rtol=0.0, budget_ms=1e9)
