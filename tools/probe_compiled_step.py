"""Where a compiled step's wall time goes, stock vs converted (GPU): under
torch.compile(mode="reduce-overhead") the converted ConvNeXt-nano inference step paid 0.56 ms more per
synchronized step than stock at equal kernel time (BENCHMARKS.md). Per variant this times synchronized steps
split into the host part (until the call returns) and the wait for the device, back-to-back steps, and
profiles a few steps with CPU and CUDA activity: the top host-side ops by self CPU time, graph launches and
kernels per step, and the GPU's busy time within the span of each step's kernels.

Usage (GPU):  python tools/probe_compiled_step.py convnext_nano resnet50 [--phase infer,train] [--out F.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
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
    return {"host_top_ms": dict(sorted(host.items(), key=lambda kv: -kv[1])[:top]),
            "graph_launches_per_step": sum("cudaGraphLaunch" in e.name for e in events) / steps,
            "kernels_per_step": len(kernels) / steps, "gpu_busy_ms": busy,
            "gpu_span_ms_per_step": span}


def probe(name: str, phase: str, steps: int, top: int) -> dict[str, Any]:
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
        for _ in range(WARMUP):
            step()
        torch.cuda.synchronize()
        result[variant] = {**split_times(step, steps), **profile(step, 5, top)}
        print(f"{name} {phase} {variant}: " + ", ".join(f"{k} {v:.3f}" for k, v in result[variant].items()
                                                         if isinstance(v, float)), flush=True)
        del runner, model
        bench._reset_compiled()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--phase", default="infer", help="train, infer or both (comma-separated)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--top", type=int, default=15, help="host ops listed per variant")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    results = [probe(name, phase, args.steps, args.top)
               for name in args.models for phase in args.phase.split(",")]
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
