"""Where a compiled step's wall time goes, stock vs converted (GPU): under
torch.compile(mode="reduce-overhead") the converted ConvNeXt-nano inference step paid 0.56 ms more per
synchronized step than stock at equal kernel time (BENCHMARKS.md). Per variant this times synchronized steps
split into the host part (until the call returns) and the wait for the device, back-to-back steps, and
profiles a few steps with CPU and CUDA activity: the top host-side ops by self CPU time, graph launches and
kernels per step, and the GPU's busy time within the span of each step's kernels; Dynamo's cache lookups per
step, the cache entries on the model's forward with the time of one guard check each, and (--guards-dir)
the guards themselves.

Usage (GPU):  python tools/probe_compiled_step.py convnext_nano resnet50 [--phase infer,train] [--out F.json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import models as bench  # noqa: E402

WARMUP = 30   # compile, cudagraph-tree warm-up and recording, then replays


def split_times(step: Any, steps: int) -> dict[str, float]:
    """Medians of the host part of a synchronized step (the call until it returns), the wait for the device
    after it, and their sum; then the mean of back-to-back steps."""
    import torch

    host, wait = [], []
    torch.cuda.synchronize()
    for _ in range(steps):
        start = time.perf_counter()
        step()
        returned = time.perf_counter()
        torch.cuda.synchronize()
        host.append((returned - start) * 1e3)
        wait.append((time.perf_counter() - returned) * 1e3)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return {"host_ms": statistics.median(host), "wait_ms": statistics.median(wait),
            "sync_step_ms": statistics.median(h + w for h, w in zip(host, wait)),
            "back_to_back_ms": (time.perf_counter() - start) * 1e3 / steps}


def profile(step: Any, steps: int, top: int) -> dict[str, Any]:
    """Host ops by self CPU time per step, graph launches, kernels, and the GPU's busy / idle time inside the
    span of each step's kernels (a profiled, synchronized step)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
            torch.cuda.synchronize()
    events = prof.events()
    host: dict[str, float] = {}
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CPU:
            host[e.name] = host.get(e.name, 0.0) + e.self_cpu_time_total / 1e3 / steps
    kernels = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    busy = sum(e.time_range.elapsed_us() for e in kernels) / 1e3 / steps
    span = (kernels[-1].time_range.end - kernels[0].time_range.start) / 1e3 / steps if kernels else 0.0
    lookups = [e for e in events if "Cache Lookup" in e.name]
    return {"host_top_ms": dict(sorted(host.items(), key=lambda kv: -kv[1])[:top]),
            "cache_lookups_per_step": len(lookups) / steps,
            "cache_lookup_ms_per_step": sum(e.cpu_time_total for e in lookups) / 1e3 / steps,
            "graph_launches_per_step": sum("cudaGraphLaunch" in e.name for e in events) / steps,
            "kernels_per_step": len(kernels) / steps, "gpu_busy_ms": busy,
            "gpu_span_ms_per_step": span}


def cache_entries(model: Any, x: Any, repeats: int = 2000) -> dict[str, Any]:
    """Dynamo's cache entries on the model's forward code, and the time of one guard check of each against
    the step's own locals (self, x): the part of "TorchDynamo Cache Lookup" that the guards cost."""
    import torch

    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(type(model).forward.__code__)
    found: list[dict[str, Any]] = []
    for entry in entries:
        local = {"self": model, "x": x}
        row: dict[str, Any] = {"compile_id": str(entry.compile_id), "guards_text_lines":
                               len(str(entry.guard_manager).splitlines())}
        try:
            start = time.perf_counter()
            for _ in range(repeats):
                ok = entry.guard_manager.check(local)
            row.update(check_us=(time.perf_counter() - start) * 1e6 / repeats, passes=bool(ok))
        except (RuntimeError, TypeError, KeyError, AttributeError) as err:   # report, the probe goes on
            row["check_error"] = f"{type(err).__name__}: {err}"
        found.append(row)
    return {"forward_entries": found,
            "dynamo_counters": {k: dict(v) for k, v in torch._dynamo.utils.counters.items()}}


def probe(name: str, phase: str, steps: int, top: int, guards_dir: Path | None) -> dict[str, Any]:
    import torch

    spec = next(m for m in bench.MODELS if m.name == name)
    s = bench.Settings(phases=(phase,), modes=("compiled",))
    base, _ = bench.build(spec)
    result: dict[str, Any] = {"model": name, "phase": phase}
    for variant in bench.VARIANTS:
        model, _ = bench._prepare(base, variant, torch.device("cuda"), torch.bfloat16, spec.video)
        x, labels = bench._inputs(spec, s, torch.device("cuda"), torch.bfloat16, bench._num_classes(base))
        model.train() if phase == "train" else model.eval()
        runner = torch.compile(model, mode="reduce-overhead")
        step = bench.make_step(phase, runner, model, x, labels, True)
        with _guards_logged(guards_dir / f"{name}_{phase}_{variant}.txt" if guards_dir else None):
            for _ in range(WARMUP):
                step()
            torch.cuda.synchronize()
        result[variant] = {**split_times(step, steps), **profile(step, 5, top), **cache_entries(model, x)}
        print(f"{name} {phase} {variant}: " + ", ".join(f"{k} {v:.3f}" for k, v in result[variant].items()
                                                         if isinstance(v, float)), flush=True)
        del runner, model
        bench._reset_compiled()
        torch._dynamo.utils.counters.clear()
    return result


@contextlib.contextmanager
def _guards_logged(path: Path | None) -> Iterator[None]:
    """Inside: the guards Dynamo installs (torch's "guards" log artifact) are written to path (nothing when
    path is None); on leaving, torch's log settings are reset, so later compiles log no guards."""
    if path is None:
        yield
        return
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch._logging.set_logs(guards=True)
    handler = logging.FileHandler(path, mode="w")
    logger = logging.getLogger("torch._dynamo.guards")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
        torch._logging.set_logs()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--phase", default="infer", help="train, infer or both (comma-separated)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--top", type=int, default=15, help="host ops listed per variant")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--guards-dir", type=Path, help="write each variant's guards here")
    args = parser.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    results = [probe(name, phase, args.steps, args.top, args.guards_dir)
               for name in args.models for phase in args.phase.split(",")]
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
