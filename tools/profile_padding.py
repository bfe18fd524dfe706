"""Where the time of padded GEMM plans goes, on the GPU: for each named shape, every plan of the dtype/layout's
essential preset that runs on padded operands is run under torch.profiler, and the CUDA kernels of one call (the
copies, margin fills, the GEMM itself, the copy back) are listed with their mean device time, beside the
CUDA-event time of the whole call and of the same kernel on a problem whose sizes need no padding.

    python tools/profile_padding.py --combo bf16_rcr --shapes 777x1234x555,3000x5000x700 [--top 3] [--json PATH]
"""
from __future__ import annotations

import argparse
import collections
import functools
import json

import torch

import tiledispatch as td
from tiledispatch.runtime.execute import run_selection
from tiledispatch.testing.inputs import make_args
from tiledispatch.select.selector import Selection, plans_of


def event_us(fn, reps: int = 50, warmup: int = 5) -> float:
    """Mean µs per call of fn over `reps` back-to-back calls (CUDA events, no L2 flush), after `warmup` calls."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def kernels_of(fn, reps: int = 20, width: int | None = 70) -> list[tuple[str, float]]:
    """(kernel name, cut to `width` characters, mean device µs per call) of the CUDA kernels that one call of fn
    launches."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = collections.defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name[:width]] += event.device_time / reps
    return sorted(totals.items(), key=lambda kv: -kv[1])


def profile(combo: str, shape: str, top: int) -> list[dict]:
    dtype, layout = combo.split("_")
    m, n, k = (int(v) for v in shape.split("x"))
    problem = td.GemmProblem(m, n, k, dtype=dtype, layout=layout)
    reg = td.Registry(td.detect())
    reg.add_preset(f"gemm_{dtype}_{layout}_essential")
    reg.build()
    args = make_args(problem, torch.device("cuda"))   # no out: as td.gemm runs a padded plan (no copy back)
    rows = []
    for plan in [p for p in plans_of(reg.kernels, problem) if p.padded][:top]:
        sel = Selection(plan.kernel, "profile", plan.problem, True)
        p = plan.problem
        aligned = make_args(p, torch.device("cuda"))
        call = functools.partial(run_selection, sel, args)
        bare = functools.partial(plan.kernel.launch, aligned, p)
        row = {"combo": combo, "shape": shape, "kernel": plan.kernel.name, "padded_to": f"{p.m}x{p.n}x{p.k}",
               "call_us": event_us(call), "kernel_alone_us": event_us(bare), "kernels": kernels_of(call)}
        rows.append(row)
        print(f"{combo} {shape} -> {row['padded_to']}  {plan.kernel.name}\n  call {row['call_us']:.1f} us, "
              f"kernel on the padded problem alone {row['kernel_alone_us']:.1f} us")
        for name, us in row["kernels"]:
            print(f"    {us:8.2f} us  {name}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--combo", action="append", required=True, help="dtype_layout, e.g. bf16_rcr (repeatable)")
    ap.add_argument("--shapes", required=True, help="comma list of MxNxK")
    ap.add_argument("--top", type=int, default=3, help="padded plans per shape (preset order)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = [r for combo in args.combo for s in args.shapes.split(",") for r in profile(combo, s, args.top)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
