"""Sweeps: measure every (problem, kernel) pair of a problem set and a set of presets into a dataset.

    report = run_sweep(SweepSpec(problems=corpus_entries, presets=("gemm_bf16_rcr_candidates",),
                                 out="data/x"))

The kernels are built first (in parallel, cached). Pairs a kernel cannot run (`unsupported`) or could not be
built (`compile_error`) are recorded without touching a device; the rest go, one batch per problem, to the
executor. Rows are written in atomic parts as they come, so a sweep killed at any moment loses at most the
rows not yet written, and `resume=True` measures exactly the pairs that are missing (those of a damaged part
too: it is reported and moved aside).
"""
from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tiledispatch.bench.dataset import Dataset
from tiledispatch.bench.executors import LocalPool, PoolOptions, SweepError, local_specs
from tiledispatch.bench.measure import plan_for
from tiledispatch.bench.schema import Outcome, direction_of, make_row, now, op_of, problem_json, problem_key
from tiledispatch.bench.worker import Batch, Pair, WorkerSpec
from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.problems.corpus import CorpusEntry

EXECUTORS = ("local", "ray")


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    problems: tuple[CorpusEntry, ...]
    out: Path
    presets: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()            # instance names (from config files)
    resume: bool = False
    executor: str = "local"
    gpus: tuple[int, ...] | None = None      # None: every visible GPU (none: the CPU interpreter)
    cpu_workers: int = 1
    timeout_s: float = 120.0
    vendor: bool = False
    arch: str | None = None
    seed: int = 0
    ray_address: str | None = None
    ray_problems_per_task: int = 8
    flush_rows: int = 2000
    flush_s: float = 20.0
    build_workers: int | None = None
    worker_setup: str | None = None          # "module:function" run in each worker (tests plant faults)
    progress: bool | None = None


@dataclasses.dataclass
class SweepReport:
    dataset: str
    pairs: int = 0                 # every (problem, kernel) pair of the sweep
    resumed: int = 0               # already in the dataset (skipped)
    recorded: int = 0              # rows written by this run
    measured: int = 0              # of which went through a worker
    by_status: dict[str, int] = dataclasses.field(default_factory=dict)
    build_seconds: float = 0.0
    measure_seconds: float = 0.0   # from the first worker ready to the last row (worker start-up excluded)
    workers: list[str] = dataclasses.field(default_factory=list)
    gpu: str = ""
    damaged_parts: list[str] = dataclasses.field(default_factory=list)   # unreadable, moved aside on resume

    @property
    def pairs_per_second(self) -> float:
        return self.measured / self.measure_seconds if self.measure_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "pairs_per_second": round(self.pairs_per_second, 2)}


class _Writer:
    """Buffers rows and writes them as dataset parts (every flush_rows rows or flush_s seconds)."""

    def __init__(self, dataset: Dataset, report: SweepReport, flush_rows: int, flush_s: float) -> None:
        self.dataset, self.report, self.flush_rows, self.flush_s = dataset, report, flush_rows, flush_s
        self.rows: list[dict[str, Any]] = []
        self.last = time.monotonic()

    def __call__(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self.report.by_status[row["status"]] = self.report.by_status.get(row["status"], 0) + 1
        self.report.recorded += len(rows)
        self.rows += rows
        if len(self.rows) >= self.flush_rows or time.monotonic() - self.last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        self.dataset.append(self.rows)
        self.rows, self.last = [], time.monotonic()


def run_sweep(spec: SweepSpec, on_status: Callable[[str], None] = lambda _: None) -> SweepReport:
    """Run a sweep to completion (or until interrupted: every row measured so far is kept)."""
    if spec.executor not in EXECUTORS:
        raise bad_choice(BadInput, "executor", spec.executor, EXECUTORS)
    op, direction, dtype = _sweep_kind(spec.problems)
    gpus, gpu_name = _devices(spec)
    registry, failed, build_s = _build(spec, on_status)
    dataset = Dataset(spec.out, on_status)
    with dataset.lock():
        dataset.open(op, direction, dtype, gpu_name, spec.resume,
                     {"presets": list(spec.presets), "configs": len(spec.configs),
                      "problems": len(spec.problems)})
        done = dataset.done_pairs(quarantine=True) if spec.resume else set()
        report = SweepReport(str(spec.out), build_seconds=build_s, gpu=gpu_name,
                             damaged_parts=[str(p) for p in dataset.corrupt])
        sweep_id = uuid.uuid4().hex[:12]
        stamp = _main_stamp(registry.arch.name, gpu_name, sweep_id)
        writer = _Writer(dataset, report, spec.flush_rows, spec.flush_s)
        batches = _plan(spec, registry, failed, done, stamp, report, writer, bool(gpus))
        writer.flush()
        if not batches:
            return report
        base = WorkerSpec(registry.arch.name, bool(gpus), sweep_id, "", spec.seed, setup=spec.worker_setup)
        try:
            _execute(spec, batches, base, gpus, writer, report, on_status)
        finally:
            writer.flush()
    return report


def _sweep_kind(entries: Sequence[CorpusEntry]) -> tuple[str, str, str]:
    if not entries:
        raise BadInput("the sweep has no problems", field="problems")
    kinds = {(op_of(e.problem), direction_of(e.problem), e.problem.dtype) for e in entries}
    if len(kinds) > 1:
        raise BadInput(f"a dataset holds one (op, direction, dtype); these problems mix {sorted(kinds)}",
                       field="problems")
    return kinds.pop()


def _devices(spec: SweepSpec) -> tuple[tuple[int, ...], str]:
    from tiledispatch.arch.spec import cuda_available

    if not cuda_available():
        if spec.gpus:
            raise BadInput(f"--gpus {','.join(map(str, spec.gpus))}: no CUDA GPU is visible", field="gpus")
        return (), "cpu (Triton interpreter)"
    import torch

    count = torch.cuda.device_count()
    gpus = spec.gpus if spec.gpus is not None else tuple(range(count))
    bad = [g for g in gpus if not 0 <= g < count]
    if bad:
        raise BadInput(f"--gpus: {bad} not among the {count} visible GPUs", field="gpus")
    names = {torch.cuda.get_device_name(g) for g in gpus}
    if len(names) > 1:
        raise BadInput(f"--gpus mixes GPU models {sorted(names)}; a dataset is for one GPU", field="gpus")
    return tuple(gpus), names.pop()


def _build(spec: SweepSpec, on_status: Callable[[str], None]):
    from tiledispatch.registry.registry import Registry

    registry = Registry(spec.arch)
    for name in spec.presets:
        registry.add_preset(name)
    for name in spec.configs:
        registry.add(name)
    if not len(registry):
        raise BadInput("the sweep has no kernels: give --preset or --config", field="preset")
    report = registry.build(max_workers=spec.build_workers, progress=spec.progress)
    on_status(f"build: {report}")
    return registry, dict(report.failed), report.seconds


def _main_stamp(arch: str, gpu: str, sweep_id: str) -> dict[str, Any]:
    from tiledispatch.bench.schema import SCHEMA_VERSION
    from tiledispatch.version import __version__

    return {"gpu": gpu, "arch": arch, "tiledispatch": __version__, "schema_version": SCHEMA_VERSION,
            "sweep_id": sweep_id, "worker": "main", "timestamp": now()}


def _plan(spec: SweepSpec, registry: Any, failed: dict[str, str], done: set, stamp: dict[str, Any],
          report: SweepReport, writer: _Writer, cuda: bool) -> list[Batch]:
    """Rows for the pairs no device needs to see; one batch per problem for the rest."""
    batches: list[Batch] = []
    seen: set[str] = set()
    with_vendor = {key for key, name in done if name.startswith("vendor:")}
    for entry in spec.problems:
        key = problem_key(entry.problem)
        if key in seen:
            continue
        seen.add(key)
        pairs: list[Pair] = []
        for kernel in registry.kernels:
            report.pairs += 1
            if (key, kernel.name) in done:
                report.resumed += 1
                continue
            if kernel.name in failed:
                outcome = Outcome("compile_error", failed[kernel.name][:500])
            else:
                padded, reason = plan_for(kernel, entry.problem)
                if padded is not None:
                    pairs.append(Pair(kernel.name, padded))
                    continue
                outcome = Outcome("unsupported", reason[:500])
            writer([make_row(entry.problem, entry.tag, kernel.name, kernel.config, outcome, stamp)])
        if spec.vendor and cuda and key not in with_vendor:
            pairs.append(Pair("vendor", vendor=True))
        if pairs:
            batches.append(Batch(len(batches), problem_json(entry.problem), entry.tag, tuple(pairs)))
    return batches


def _execute(spec: SweepSpec, batches: list[Batch], base: WorkerSpec, gpus: tuple[int, ...], writer: _Writer,
             report: SweepReport, on_status: Callable[[str], None]) -> None:
    from tiledispatch.progress import progress_bar

    total = sum(len(b.pairs) for b in batches)
    before = report.recorded
    options = PoolOptions(timeout_s=spec.timeout_s)
    start = time.monotonic()
    with progress_bar(f"sweeping {len(batches)} problems", total, spec.progress) as advance:
        if spec.executor == "ray":
            from tiledispatch.bench.ray_executor import run_on_ray

            report.workers = run_on_ray(batches, base, bool(gpus), writer, advance, options, spec.ray_address,
                                        spec.ray_problems_per_task)
        else:
            specs = local_specs(base, gpus, spec.cpu_workers)
            report.workers = [s.label for s, _ in specs]
            pool = LocalPool(specs, options)
            pool.run(batches, writer, advance)
            # throughput counts from the first worker up (not its start-up)
            start = pool.first_ready or start
    report.measure_seconds = time.monotonic() - start
    report.measured = report.recorded - before
    if report.measured != total:
        raise SweepError(f"{total} pairs were sent to workers but {report.measured} rows came back",
                         field="workers")
    on_status(f"measured {report.measured} pairs in {report.measure_seconds:.1f} s "
              f"({report.pairs_per_second:.1f} pairs/s)")
