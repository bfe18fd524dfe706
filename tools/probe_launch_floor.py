"""Probe: the fixed cost of one launch under the benchmarks' protocol (L2 flushed before each call, CUDA events
around it), for a torch kernel, for Triton kernels that do next to nothing (launched directly, as the registry
launches them) with a small or a large shared-memory footprint, and beside them cuBLAS and the registry's best
on 1000^3 bf16, where every Triton form stays about 2 us behind cuBLAS (results/profiles/probe_ws_gluon_bf16).
If the floors differ by that much, the gap is the launch, not the kernel.

Measured on the H200 (benchmarks/results/profiles/probe_launch_floor_h200.json): 3.7 us for every Triton and
Gluon form (grid 1 or 132, 2 or 192 KiB of shared memory), 3.9 us for torch's; cuBLAS 1000^3 10.8 us, the
registry's best 12.6 us. The gap is inside the kernel.

    python tools/probe_launch_floor.py [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@triton.jit
def touch_kernel(x, N: tl.constexpr):
    """Program 0 adds one to x[0]; the others exit."""
    if tl.program_id(0) == 0:
        offs = tl.arange(0, N)
        v = tl.load(x + offs, mask=offs < 1)
        tl.store(x + offs, v + 1, mask=offs < 1)


@gluon.jit
def smem_kernel(x, SMEM: gl.constexpr, SMEM2: gl.constexpr, num_warps: gl.constexpr):
    """As touch_kernel, with SMEM + SMEM2 bytes of shared memory allocated (powers of 2; 128 + 64 KiB: the
    footprint of a deep TMA ring)."""
    buf = gl.allocate_shared_memory(gl.int8, [SMEM], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    extra = gl.allocate_shared_memory(gl.int8, [SMEM2], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    offs = gl.arange(0, 32 * num_warps, layout=layout)
    if gl.program_id(0) == 0:
        v = gl.load(x + offs, mask=offs < 1)
        buf.slice(0, 32 * num_warps).store(v.to(gl.int8))
        extra.slice(0, 32 * num_warps).store(v.to(gl.int8))
        gl.store(x + offs, v + 1, mask=offs < 1)


def _direct(jit, grid: tuple, *args, **consts):
    """The compiled kernel's direct launch (as runtime/launcher.py fires entries), after one JIT launch."""
    import torch

    kernel = jit[grid](*args, **consts)
    values = (*args, *consts.values())
    run, fn, packed = kernel.run, kernel.function, kernel.packed_metadata
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: run(*grid, 1, 1, stream, fn, packed, None, None, None, *values)


def main() -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from protocol import CudaTimer, Protocol

    import tiledispatch as td

    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    opts = parser.parse_args()
    dev = torch.device("cuda")
    timer = CudaTimer(Protocol(), dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    x = torch.zeros(1024, device=dev, dtype=torch.float32)
    calls = {"torch add_ (1 element)": lambda: x[:1].add_(1)}
    for grid in (1, sms):
        calls[f"triton touch grid {grid}"] = _direct(touch_kernel, (grid,), x, N=128)
        for smem, smem2 in ((1024, 1024), (128 * 1024, 64 * 1024)):
            calls[f"gluon smem {(smem + smem2) // 1024} KiB grid {grid}"] = _direct(
                smem_kernel, (grid,), x, SMEM=smem, SMEM2=smem2, num_warps=4)
    a = torch.randn(1000, 1000, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1000, 1000, device=dev, dtype=torch.bfloat16).t()
    c = torch.empty(1000, 1000, device=dev, dtype=torch.bfloat16)
    calls["cuBLAS 1000^3 bf16"] = lambda: torch.mm(a, b, out=c)
    reg = td.Registry("sm_90")
    reg.add("gemm-tma_persistent-rcr-bf16-bf16-fp32-64x128x128-w4-s3-g8-k1-e1-a16-none-bnone-d0-c0")
    reg.build()
    (kernel,) = reg.kernels
    calls[f"registry {kernel.name}"] = lambda: kernel.run(a, b, out=c)
    rows = {}
    for label, fn in calls.items():
        fn()
        t = timer.time_ms(fn)
        rows[label] = {"us": t.ms * 1e3, "p20_us": t.p20_ms * 1e3, "p80_us": t.p80_ms * 1e3}
        print(f"{t.ms * 1e3:8.2f} us  {label}", flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(dev), "triton": triton.__version__,
                                               "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
