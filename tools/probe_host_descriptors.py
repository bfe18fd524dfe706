"""Probe: does building tensor descriptors on the device cost small GEMMs their start-up time?

One program per 128x64 (or 64x128) output tile of a bf16 rcr GEMM, TMA loads through tensor descriptors made
either on the host (TensorDescriptor arguments: the launch passes the encoded tensor maps) or on the device
(tl.make_tensor_descriptor: each program writes its maps to global scratch and fences them), the same pipelined
K loop and a pointer store. Timed like the benchmark (256 MB flush before each call, CUDA events, median of 100)
and back-to-back, against torch.mm, on 1024^3 and 1000^3.

    python tools/probe_host_descriptors.py [--json PATH]
"""
from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tiledispatch.bench.timer import FLUSH_MB, flushed_event_samples, quantile


@triton.jit
def _tile(a_desc, b_desc, out_ptr, M, N, K, stride_om, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          STAGES: tl.constexpr):
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BN)
    pid_m, pid_n = pid // grid_n, pid % grid_n
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=STAGES):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None].to(tl.int64) * stride_om + rn[None, :], acc.to(tl.bfloat16), mask=mask)


@triton.jit
def gemm_host_desc(a_desc, b_desc, out_ptr, M, N, K, stride_om, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, STAGES: tl.constexpr):
    _tile(a_desc, b_desc, out_ptr, M, N, K, stride_om, BM, BN, BK, STAGES)


@triton.jit
def gemm_device_desc(a_ptr, b_ptr, out_ptr, M, N, K, stride_am, stride_bn, stride_om, BM: tl.constexpr,
                     BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BN, BK])
    _tile(a_desc, b_desc, out_ptr, M, N, K, stride_om, BM, BN, BK, STAGES)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    opts = parser.parse_args()
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    flush = torch.empty(FLUSH_MB * 2**20, dtype=torch.int8, device="cuda")
    rows = []
    for size in (1024, 1000):
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        bt = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)   # B column-major: B^T row-major
        out = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ bt.float().t()
        runs = {"torch.mm": lambda: torch.mm(a, bt.t(), out=out)}
        for bm, bn, stages in ((128, 64, 4), (64, 128, 4), (128, 64, 6), (64, 128, 6), (128, 128, 4)):
            grid = (triton.cdiv(size, bm) * triton.cdiv(size, bn),)
            a_desc = TensorDescriptor.from_tensor(a, [bm, 64])
            b_desc = TensorDescriptor.from_tensor(bt, [bn, 64])
            kw = dict(BM=bm, BN=bn, BK=64, STAGES=stages, num_warps=4)
            runs[f"host {bm}x{bn} s{stages}"] = (lambda g, ad, bd, kw: lambda: gemm_host_desc[g](
                ad, bd, out, size, size, size, out.stride(0), **kw))(grid, a_desc, b_desc, kw)
            runs[f"host+encode {bm}x{bn} s{stages}"] = (lambda g, bm, bn, kw: lambda: gemm_host_desc[g](
                TensorDescriptor.from_tensor(a, [bm, 64]), TensorDescriptor.from_tensor(bt, [bn, 64]), out, size,
                size, size, out.stride(0), **kw))(grid, bm, bn, kw)
            runs[f"device {bm}x{bn} s{stages}"] = (lambda g, kw: lambda: gemm_device_desc[g](
                a, bt, out, size, size, size, a.stride(0), bt.stride(0), out.stride(0), **kw))(grid, kw)
        for name, fn in runs.items():
            out.zero_()
            fn()
            err = float((out.float() - ref).norm() / ref.norm())
            samples = flushed_event_samples(fn, 100, flush, torch.device("cuda"))
            row = {"size": size, "variant": name, "rel_err": err, "flushed_us": quantile(samples, 0.5) * 1e3}
            rows.append(row)
            print(f"{size}^3 {name:24s} flushed {row['flushed_us']:6.1f} us  err {err:.1e}", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "triton": triton.__version__, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
