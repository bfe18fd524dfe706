"""Probe: host time of td.gemm per call (what a user's Python thread pays), and where it goes (cProfile).

For each shape: host microseconds per call of td.gemm (strategy auto), of its selection run without the memo's
bound launch (run_selection on fresh GemmArgs: what a repeated padded call cost before padded decisions had
one) and of torch.mm, while the GPU is kept busy (a sleep kernel first, so no call waits on the device), then a
cProfile of td.gemm calls with the functions that take the most own time.

    python tools/profile_host.py --dtype bf16 --shapes 777x1234x555,1000x1000x1000 [--json PATH]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time

import torch

import tiledispatch as td
from tiledispatch import api
from tiledispatch.runtime.arguments import problem_from_args
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.runtime.execute import run_selection

CALLS = 150          # at most 4 launches per call: 600 stay within the launch queue behind the sleep
SLEEP_CYCLES = 400_000_000


def host_us(fn) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    us = (time.perf_counter() - t0) / CALLS * 1e6
    torch.cuda.synchronize()
    return us


def profile_text(fn, top: int) -> str:
    profiler = cProfile.Profile()
    torch.cuda._sleep(SLEEP_CYCLES)
    profiler.enable()
    for _ in range(CALLS):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument("--shapes", default="777x1234x555,1000x1000x1000")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json")
    opts = parser.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[opts.dtype]
    rows = []
    for shape in opts.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(n, k, device="cuda", dtype=dtype).t()
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        registry = api.default_registry(problem_from_args(GemmArgs(a, b)))
        _, selection = registry.run(None, a, b, return_selection=True)
        row = {"shape": shape, "kernel": selection.kernel.name, "padded": selection.padded,
               "td_gemm_us": host_us(lambda: td.gemm(a, b)),
               "run_selection_us": host_us(lambda: run_selection(selection, GemmArgs(a, b))),
               "td_gemm_out_us": host_us(lambda: td.gemm(a, b, out=out)),
               "torch_mm_us": host_us(lambda: torch.mm(a, b)),
               "profile": profile_text(lambda: td.gemm(a, b), opts.top)}
        print(f"{shape} ({selection.kernel.name}, padded={selection.padded}): td.gemm {row['td_gemm_us']:.1f} us, "
              f"with out {row['td_gemm_out_us']:.1f} us, run_selection {row['run_selection_us']:.1f} us, "
              f"torch.mm {row['torch_mm_us']:.1f} us (host per call)")
        print(row["profile"])
        rows.append(row)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "tiledispatch": td.__version__, "calls": CALLS, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
