"""Probe: how fast the SMs can read from L2 (and from HBM), for the operand-traffic bound of GEMM shapes.

A read kernel streams blocks of a buffer (resident in L2 when it is smaller than L2; far larger for HBM) with
`programs` programs, each summing `iters` blocks of BLOCK fp32 values (64 KiB) into registers. The rate is the
bytes read over the CUDA-event time of back-to-back launches (a warm-up launch first). The same run prints, for
the GEMM rows named on the command line, the bytes that their tiles read from L2 (every output tile reads its
BLOCK_M x K rows of A and K x BLOCK_N columns of B) and the time that traffic takes at the measured rate.

    python tools/probe_l2_bandwidth.py [--json PATH] [--gemm M,N,K,BM,BN,US ...]
"""
from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl

BLOCK = 16384          # fp32 values per load step of one program: 64 KiB
REPEATS = 20


@triton.jit
def _read_kernel(src, out, n_blocks, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(ITERS):
        block = (pid + i * programs) % n_blocks      # neighbouring programs read neighbouring blocks
        acc += tl.load(src + block.to(tl.int64) * BLOCK + offs)
    tl.store(out + pid.to(tl.int64) * BLOCK + offs, acc)


def read_rate(buffer_mb: int, programs: int, iters: int) -> float:
    """Bytes per second read by `programs` programs of `iters` blocks each from a buffer of buffer_mb MiB."""
    n_blocks = buffer_mb * 2**20 // (BLOCK * 4)
    src = torch.randn(n_blocks * BLOCK, device="cuda")
    out = torch.empty(programs * BLOCK, device="cuda")
    launch = lambda: _read_kernel[(programs,)](src, out, n_blocks, ITERS=iters, BLOCK=BLOCK, num_warps=8)  # noqa: E731
    launch()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPEATS):
        launch()
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / REPEATS
    return programs * iters * BLOCK * 4 / seconds


def gemm_traffic(m: int, n: int, k: int, bm: int, bn: int, in_bytes: int = 2) -> int:
    """Bytes the output tiles of a data-parallel BLOCK_M x BLOCK_N GEMM read: each tile its A rows and B columns."""
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    return tiles_m * tiles_n * (bm + bn) * k * in_bytes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--gemm", nargs="*", default=[],
                        help="M,N,K,BLOCK_M,BLOCK_N,MEASURED_US rows to set against the measured L2 rate")
    opts = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for buffer_mb in (8, 24, 40, 2048):
        for programs in (sms // 2, 96, sms, 2 * sms):
            rate = read_rate(buffer_mb, programs, iters=256)
            rows.append({"buffer_mb": buffer_mb, "programs": programs, "tb_per_s": rate / 1e12})
            print(f"buffer {buffer_mb:5d} MiB  programs {programs:4d}  {rate / 1e12:6.2f} TB/s", flush=True)
    l2 = max(r["tb_per_s"] for r in rows if r["buffer_mb"] <= 24)
    gemms = []
    for text in opts.gemm:
        m, n, k, bm, bn, us = (float(x) for x in text.split(","))
        traffic = gemm_traffic(int(m), int(n), int(k), int(bm), int(bn))
        floor_us = traffic / (l2 * 1e12) * 1e6
        gemms.append({"m": int(m), "n": int(n), "k": int(k), "block_m": int(bm), "block_n": int(bn),
                      "l2_read_mb": traffic / 2**20, "floor_us_at_best_l2_rate": floor_us, "measured_us": us,
                      "implied_tb_per_s": traffic / (us * 1e-6) / 1e12})
        print(f"{int(m)}x{int(n)}x{int(k)} tiles {int(bm)}x{int(bn)}: {traffic / 2**20:7.1f} MiB from L2, "
              f">= {floor_us:5.1f} us at {l2:.2f} TB/s; measured {us:.1f} us "
              f"({traffic / (us * 1e-6) / 1e12:.2f} TB/s)", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "sm_count": sms, "triton": triton.__version__,
                       "torch": torch.__version__, "block_bytes": BLOCK * 4, "repeats": REPEATS,
                       "best_l2_tb_per_s": l2, "rows": rows, "gemm": gemms}, f, indent=1)


if __name__ == "__main__":
    main()
