"""Probe: a warp-specialized bf16 / fp16 GEMM (rcr) written in Gluon, against cuBLAS and the registry's best, on
the small squares where every tl.dot form stays 15-20 % behind cuBLAS (1000^3: 12.8 us against 10.4-11.0).
Measured on the H200 (benchmarks/results/profiles/probe_ws_gluon_bf16_h200.json): no better; 1000^3 13.3 us
(one consumer group, 64x128x128, 4 stages) against the registry's 12.9 and cuBLAS's 11.0, 1024^3 10.3 against
10.5 and 9.5, and 10 % behind the registry at 4096^3.

The form: persistent (one program per SM), a producer warp issuing TMA loads into a ring of STAGES slots, and
one or two consumer warp groups (partitions of their own, 64 rows of the tile each) that chain each K block's
wgmma onto the accumulator and keep one group in flight (a wait with one outstanding group, then the previous
block's slot goes back to the producer), a TMA store per warp group's rows. The producer and the tile order
are tools/probe_fp8_gluon.py's.

    python tools/probe_ws_gluon.py [--shapes 1000x1000x1000,...] [--dtype bf16] [--json PATH]
"""
from __future__ import annotations

import argparse
import json

import triton
from probe_fp8_gluon import _tile_coords, _ws_producer   # tools/ is the script's directory
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)


@gluon.jit
def _consume(c_desc, c_smem, full, empty, a_bufs, b_bufs, my_tiles, k_tiles, num_pid_m, num_pid_n,
             layout: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, WG: gl.constexpr,
             BM: gl.constexpr):
    ROWS: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    c = 0
    for t in range(my_tiles):
        acc = gl.zeros((ROWS, BN), dtype=gl.float32, layout=layout)
        for kk in range(k_tiles):
            slot = (c + kk) % STAGES
            mbarrier.wait(full.index(slot), ((c + kk) // STAGES) & 1)
            a = a_bufs.index(slot).slice(WG * ROWS, ROWS, dim=0)
            acc = warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if kk > 0:
                mbarrier.arrive(empty.index((c + kk - 1) % STAGES), count=1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index((c + k_tiles - 1) % STAGES), count=1)
        c += k_tiles
        tile = gl.program_id(0) + t * gl.num_programs(0)
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        tma.store_wait(pendings=0)
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [pid_m * BM + WG * ROWS, pid_n * BN], c_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def _prologue(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    num_pid_m = gl.cdiv(M, a_desc.block_type.shape[0])
    num_pid_n = gl.cdiv(N, c_desc.block_type.shape[1])
    k_tiles = gl.cdiv(K, a_desc.block_type.shape[1])
    my_tiles = gl.cdiv(num_pid_m * num_pid_n - gl.program_id(0), gl.num_programs(0))
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)
    return num_pid_m, num_pid_n, k_tiles, my_tiles, a_bufs, b_bufs, full, empty


@gluon.jit
def ws2_kernel(a_desc, b_desc, c_desc, M, N, K, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
               num_warps: gl.constexpr):
    """Two consumer warp groups (a 128-row tile)."""
    BN: gl.constexpr = c_desc.block_type.shape[1]
    num_pid_m, num_pid_n, k_tiles, my_tiles, a_bufs, b_bufs, full, empty = _prologue(
        a_desc, b_desc, c_desc, M, N, K, STAGES, 2)
    c0 = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    c1 = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    gl.warp_specialize([
        (_consume, (c_desc, c0, full, empty, a_bufs, b_bufs, my_tiles, k_tiles, num_pid_m, num_pid_n, layout,
                    GROUP_M, STAGES, 0, 128)),
        (_consume, (c_desc, c1, full, empty, a_bufs, b_bufs, my_tiles, k_tiles, num_pid_m, num_pid_n, layout,
                    GROUP_M, STAGES, 1, 128)),
        (_ws_producer, (a_desc, b_desc, full, empty, a_bufs, b_bufs, my_tiles * k_tiles, k_tiles, num_pid_m,
                        num_pid_n, GROUP_M, STAGES)),
    ], [4, 1], [232, 40])


@gluon.jit
def ws1_kernel(a_desc, b_desc, c_desc, M, N, K, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
               num_warps: gl.constexpr):
    """One consumer warp group (a 64-row tile)."""
    BN: gl.constexpr = c_desc.block_type.shape[1]
    num_pid_m, num_pid_n, k_tiles, my_tiles, a_bufs, b_bufs, full, empty = _prologue(
        a_desc, b_desc, c_desc, M, N, K, STAGES, 1)
    c0 = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    gl.warp_specialize([
        (_consume, (c_desc, c0, full, empty, a_bufs, b_bufs, my_tiles, k_tiles, num_pid_m, num_pid_n, layout,
                    GROUP_M, STAGES, 0, 64)),
        (_ws_producer, (a_desc, b_desc, full, empty, a_bufs, b_bufs, my_tiles * k_tiles, k_tiles, num_pid_m,
                        num_pid_n, GROUP_M, STAGES)),
    ], [1], [40])


# (consumer warp groups, BN, BK, STAGES): tile rows are 64 per consumer warp group
TILES = [(2, 64, 64, 8), (2, 64, 64, 6), (2, 128, 64, 4), (2, 128, 64, 6), (2, 64, 128, 4), (2, 128, 128, 3),
         (1, 128, 64, 8), (1, 128, 128, 4), (1, 64, 64, 8), (1, 256, 64, 4)]


def _calls(a, b, c, dtype, m: int, n: int, k: int, sms: int) -> dict:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    calls = {}
    for wgs, bn, bk, stages in TILES:
        bm = 64 * wgs
        gdt = gl.bfloat16 if dtype == "bf16" else gl.float16
        la = gl.NVMMASharedLayout.get_default_for([bm, bk], gdt)
        lb = gl.NVMMASharedLayout.get_default_for([bn, bk], gdt)
        lc = gl.NVMMASharedLayout.get_default_for([64, bn], gdt)
        da = TensorDescriptor.from_tensor(a, [bm, bk], la)
        db = TensorDescriptor.from_tensor(b, [bn, bk], lb)
        dc = TensorDescriptor.from_tensor(c, [64, bn], lc)
        grid = (min(sms, triton.cdiv(m, bm) * triton.cdiv(n, bn)),)
        kernel = ws2_kernel if wgs == 2 else ws1_kernel

        def call(kernel=kernel, grid=grid, da=da, db=db, dc=dc, stages=stages):
            kernel[grid](da, db, dc, m, n, k, GROUP_M=8, STAGES=stages, num_warps=4)
            return c
        calls[f"ws{wgs} {bm}x{bn}x{bk} s{stages}"] = call
    return calls


def main() -> None:
    import sys
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from protocol import CudaTimer, Protocol

    import tiledispatch as td

    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="1000x1000x1000,1024x1024x1024,2048x2048x2048,256x3584x3584,"
                                            "256x6144x4096,4096x4096x4096")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--json")
    opts = parser.parse_args()
    dev = torch.device("cuda")
    timer = CudaTimer(Protocol(), dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    tdt = torch.bfloat16 if opts.dtype == "bf16" else torch.float16
    reg = td.Registry("sm_90")
    reg.add_preset(f"gemm_{opts.dtype}_rcr_essential")
    reg.build()
    rows = []
    for shape in opts.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a = torch.randn(m, k, device=dev, dtype=tdt)
        b = torch.randn(n, k, device=dev, dtype=tdt)           # K-major: B of rcr is b.T
        c = torch.empty(m, n, device=dev, dtype=tdt)
        ref = a.double() @ b.double().T
        problem = td.GemmProblem(m, n, k, dtype=opts.dtype, layout="rcr")
        calls = {"cublas": lambda a=a, b=b, c=c: torch.mm(a, b.T, out=c)}
        calls.update({f"registry {kern.name}": (lambda kern=kern, a=a, b=b, c=c: kern.run(a, b.T, out=c))
                      for kern in reg.kernels if kern.is_supported(problem)})
        calls.update(_calls(a, b, c, opts.dtype, m, n, k, sms))
        row = {"shape": shape, "results": {}}
        for label, fn in calls.items():
            try:
                err = ((fn().double() - ref).norm() / ref.norm()).item()
                ms = timer.time_ms(fn).ms
            except (RuntimeError, triton.CompilationError, triton.OutOfResources) as exc:   # recorded per form
                row["results"][label] = {"error": str(exc)[:300]}
                print(f"{shape} {label}: failed {str(exc)[:300]}", flush=True)
                continue
            row["results"][label] = {"us": ms * 1e3, "rel_err": err}
        base = row["results"]["cublas"]["us"]
        timed = {lab: r for lab, r in row["results"].items() if "us" in r}
        best_reg = min((lab for lab in timed if lab.startswith("registry")), key=lambda lab: timed[lab]["us"])
        best_ws = min((lab for lab in timed if lab.startswith("ws")), key=lambda lab: timed[lab]["us"])
        row["registry_best"], row["ws_best"] = best_reg, best_ws
        print(f"{shape}: cuBLAS {base:.1f} us | registry best {timed[best_reg]['us']:.1f} ({best_reg[9:]}) | "
              f"gluon ws best {timed[best_ws]['us']:.1f} ({best_ws}, err {timed[best_ws]['rel_err']:.1e})",
              flush=True)
        for lab in sorted((lab for lab in timed if lab.startswith("ws")), key=lambda lab: timed[lab]["us"]):
            print(f"    {timed[lab]['us']:8.1f} us  {lab}  err {timed[lab]['rel_err']:.1e}")
        rows.append(row)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(dev), "dtype": opts.dtype,
                                               "triton": triton.__version__, "tiles": TILES, "rows": rows},
                                              indent=1))


if __name__ == "__main__":
    main()
