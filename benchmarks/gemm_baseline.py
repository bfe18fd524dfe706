"""Baseline: the essential presets (best instance and the rules pick) vs cuBLAS on the GEMM shapes of the
vendor-baseline table, bf16/fp16 in rcr and rrr. Protocol: random normal inputs, output validated before
timing, triton.testing.do_bench median with L2 flushed between runs, cuBLAS timed in the same run.

Usage: python benchmarks/gemm_baseline.py --out benchmarks/results/gemm_baseline_<gpu>.json
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import platform

import torch
import triton
import triton.testing

import tiledispatch as td
from tiledispatch.runtime.execute import run_selection
from tiledispatch.testing.inputs import make_args
from tiledispatch.select.selector import Selection

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (1024, 1024, 1024), (16, 4096, 4096), (128, 8192, 1024),
          (4096, 4096, 256), (3000, 5000, 700)]


def bench(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def limits() -> dict:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = bench(lambda: a @ a)
    buf = torch.empty(2 * 1024**3 // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(buf)
    copy_ms = bench(lambda: dst.copy_(buf))
    return {"cublas_bf16_8192_tflops": 2 * 8192**3 / ms / 1e9,
            "hbm_copy_gbps": 2 * buf.numel() * 4 / copy_ms / 1e6}


def run_problem(reg: td.Registry, problem: td.GemmProblem) -> dict:
    """Time cuBLAS and every plan of the registry (direct and exactly padded); each plan is validated first."""
    args = make_args(problem, torch.device("cuda"), seed=1)
    ref = torch.matmul(args.a.float(), args.b.float())
    cublas_ms = bench(lambda: torch.matmul(args.a, args.b))
    auto = reg.select(problem, "rules")
    auto_label = auto.kernel.name + (" (padded)" if auto.padded else "")
    timings, errors = {}, {}
    for plan in reg.plans(problem):
        selection = Selection(plan.kernel, "bench", plan.problem, plan.padded)
        out = run_selection(selection, dataclasses.replace(args, out=None))
        errors[plan.label] = rel_err(out, ref)
        if errors[plan.label] <= 1e-2:
            fixed = dataclasses.replace(args, out=out)
            timings[plan.label] = bench(lambda: run_selection(selection, fixed))
    best = min(timings, key=timings.get)
    flops = problem.flops
    row = {"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype, "layout": problem.layout,
           "cublas_ms": cublas_ms, "cublas_tflops": flops / cublas_ms / 1e9,
           "best_kernel": best, "best_ms": timings[best], "best_tflops": flops / timings[best] / 1e9,
           "best_ratio": cublas_ms / timings[best], "auto_kernel": auto_label,
           "auto_ms": timings.get(auto_label, math.inf), "auto_ratio": cublas_ms / timings.get(auto_label, math.inf),
           "plans_timed": len(timings), "wrong": {k: v for k, v in errors.items() if v > 1e-2},
           "max_rel_err": max(errors[k] for k in timings), "timings_ms": timings}
    print(f"{problem.m:>5}x{problem.n:>5}x{problem.k:>5} {problem.dtype} {problem.layout}: cuBLAS "
          f"{cublas_ms * 1e3:8.1f} us | best {row['best_ms'] * 1e3:8.1f} us ({row['best_ratio']:.2f}x) | auto "
          f"{row['auto_ms'] * 1e3:8.1f} us ({row['auto_ratio']:.2f}x) {best}", flush=True)
    return row


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--layouts", default="rcr,rrr")
    opts = parser.parse_args()
    torch.manual_seed(0)
    rows, builds = [], {}
    for dtype in opts.dtypes.split(","):
        for layout in opts.layouts.split(","):
            reg = td.Registry(td.detect())
            reg.add_preset(f"gemm_{dtype}_{layout}_essential")
            report = reg.build()
            builds[f"{dtype}_{layout}"] = str(report)
            for m, n, k in SHAPES:
                rows.append(run_problem(reg, td.GemmProblem(m, n, k, dtype=dtype, layout=layout)))
    summary = {}
    for key in sorted({(r["dtype"], r["layout"]) for r in rows}):
        sub = [r for r in rows if (r["dtype"], r["layout"]) == key]
        summary["_".join(key)] = {"best_geomean": geomean([r["best_ratio"] for r in sub]),
                                  "auto_geomean": geomean([r["auto_ratio"] for r in sub]),
                                  "best_min": min(r["best_ratio"] for r in sub)}
    result = {"benchmark": "gemm_baseline", "gpu": torch.cuda.get_device_name(), "tiledispatch": td.__version__,
              "triton": triton.__version__, "torch": torch.__version__, "cuda": torch.version.cuda,
              "python": platform.python_version(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "protocol": "do_bench median (warmup 25 ms, rep 100 ms, L2 flushed), random normal inputs, "
                          "validated vs fp32 torch.matmul before timing; ratio = cublas_ms / ours_ms",
              "limits": limits(), "builds": builds, "summary": summary, "rows": rows}
    with open(opts.out, "w") as handle:
        json.dump(result, handle, indent=1)
    for key, value in summary.items():
        print(f"{key}: best geomean {value['best_geomean']:.3f}x, auto geomean {value['auto_geomean']:.3f}x, "
              f"worst best {value['best_min']:.3f}x")


if __name__ == "__main__":
    main()
