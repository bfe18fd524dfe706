"""Probe: why 1000^3 runs 30% slower than 1024^3 on the same instances, while cuBLAS loses ~15%.

Times named bf16 rcr instances and torch.mm on 1024^3, on 1000^3 (rows of 2000 bytes: not 128-byte aligned)
and on 1000^3 whose operands are views of buffers with 1024-element rows (the same sizes, every row 128-byte
aligned): flushed (benchmark protocol: CUDA events, 256 MB flush before each call, median of 100) and
back-to-back (the mean of 200 queued calls, L2 warm).

    python tools/probe_small_square.py NAME [NAME ...] [--json PATH]
"""
from __future__ import annotations

import argparse
import json

import torch

import tiledispatch as td
from tiledispatch.bench.timer import FLUSH_MB, flushed_event_samples, quantile

CASES = (("1024^3", 1024, 1024), ("1000^3", 1000, 1000), ("1000^3 ld1024", 1000, 1024))


def operands(size: int, ld: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A (size x size, row-major) and B (size x size, column-major) as views of rows of `ld` elements."""
    a = torch.randn(size, ld, device="cuda", dtype=torch.bfloat16)[:, :size]
    bt = torch.randn(size, ld, device="cuda", dtype=torch.bfloat16)[:, :size]
    return a, bt.t()


def back_to_back_us(fn, calls: int = 200) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="+")
    parser.add_argument("--json")
    opts = parser.parse_args()
    reg = td.Registry(td.detect())
    for name in opts.names:
        reg.add(name)
    report = reg.build()
    assert not report.failed, report.failed
    flush = torch.empty(FLUSH_MB * 2**20, dtype=torch.int8, device="cuda")
    rows = []
    for label, size, ld in CASES:
        a, b = operands(size, ld)
        out = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        runs = {"torch.mm": lambda: torch.mm(a, b, out=out)}
        for name in opts.names:
            kernel = reg.get(name)
            runs[name] = (lambda k: lambda: k.run(a, b, out=out))(kernel)
        for name, fn in runs.items():
            fn()
            err = float((out.float() - ref).norm() / ref.norm())
            flushed = flushed_event_samples(fn, 100, flush, torch.device("cuda"))
            row = {"case": label, "instance": name, "rel_err": err,
                   "flushed_us": quantile(flushed, 0.5) * 1e3, "back_to_back_us": back_to_back_us(fn)}
            rows.append(row)
            print(f"{label:14s} {name[5:70]:66s} flushed {row['flushed_us']:6.1f} us  "
                  f"back-to-back {row['back_to_back_us']:6.1f} us  err {err:.1e}", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
