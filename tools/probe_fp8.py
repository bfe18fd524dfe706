"""Probe of fp8 (e4m3, rcr) main-loop forms on sm_90: how the promotion of wgmma's reduced-precision
accumulation into fp32 is written decides whether consecutive K blocks' tensor-core work overlaps.

Forms (MODE):
  0 fast     acc = dot(a, b, acc)                               no promotion (Triton's sm_90 default)
  1 block    acc = dot(a, b, acc, max_num_imprecise_acc=BK)     promotion inside the dot, once per K block
  2 fma      p = dot(a, b); acc = fma(p, one, acc)              promotion as a separate op, once per K block
  3 lagged   p_k = dot(a_k, b_k) issued before acc += p_{k-1}   promotion one K block behind the dot
Without a GPU (--inspect): compiles each form for sm_90 and prints the wgmma waits of its main loop.
With a GPU: times each form x tile on the given shapes against torch._scaled_mm (fast_accum off and on),
with the benchmarks' protocol, and checks each result against an fp64 reference.

    python tools/probe_fp8.py --inspect
    python tools/probe_fp8.py [--shapes 8192x8192x8192,...] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import triton
import triton.language as tl


@triton.jit
def fp8_probe_kernel(a_ptr, b_ptr, c_ptr, M, N, K, one,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                     NUM_SMS: tl.constexpr, MODE: tl.constexpr, WS: tl.constexpr, FLAT: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BK)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=FLAT, warp_specialize=WS):
        group_id = tile_id // (GROUP_M * num_pid_n)
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((tile_id % (GROUP_M * num_pid_n)) % group_size_m)
        pid_n = (tile_id % (GROUP_M * num_pid_n)) // group_size_m
        off_m = pid_m * BM
        off_n = pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        if MODE == 3:
            prev = tl.zeros((BM, BN), dtype=tl.float32)
            for ki in range(k_tiles):
                a = a_desc.load([off_m, ki * BK])
                b = b_desc.load([off_n, ki * BK])
                p = tl.dot(a, b.T)
                acc = tl.fma(prev, one, acc)
                prev = p
            acc = tl.fma(prev, one, acc)
        else:
            for ki in range(k_tiles):
                a = a_desc.load([off_m, ki * BK])
                b = b_desc.load([off_n, ki * BK])
                if MODE == 0:
                    acc = tl.dot(a, b.T, acc)
                elif MODE == 1:
                    acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=BK)
                else:
                    acc = tl.fma(tl.dot(a, b.T), one, acc)
        c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


# what a form that Triton 3.6 cannot build raises: a failed MLIR pass (RuntimeError), a front-end error, too
# little shared memory or too many registers
FORM_FAILURES = (RuntimeError, triton.CompilationError, triton.OutOfResources)
MODES = {"fast": 0, "block": 1, "fma": 2, "lagged": 3}
TILES = [(128, 128, 128, 8, 4, False), (128, 256, 128, 8, 3, False), (128, 128, 128, 4, 4, True),
         (128, 256, 128, 4, 3, True), (64, 256, 128, 4, 4, False), (128, 128, 128, 8, 5, False)]


def signature() -> dict:
    return {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32",
            "one": "fp32"}


def inspect() -> None:
    from inspect_kernel import sass   # tools/ is the script's directory
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    for mode, code in MODES.items():
        for bm, bn, bk, warps, stages, ws in TILES[:2] + TILES[2:3]:
            consts = {"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8, "NUM_SMS": 132, "MODE": code, "WS": ws,
                      "FLAT": not ws}
            src = ASTSource(fp8_probe_kernel, signature(), consts)
            try:
                kern = triton.compile(src, target=target, options={"num_warps": warps, "num_stages": stages})
            except FORM_FAILURES as err:   # a form Triton cannot compile is reported; the probe goes on
                print(f"{mode:7s} {bm}x{bn}x{bk} w{warps} s{stages} ws={ws}: compile failed: {str(err)[:200]}")
                continue
            with tempfile.TemporaryDirectory() as tmp:   # ptxas's own waits show in the SASS only
                cubin = Path(tmp) / "k.cubin"
                cubin.write_bytes(kern.asm["cubin"])
                sass_waits = len(re.findall(r"WARPGROUP\.DEPBAR", sass(cubin)))
            ttgir = kern.asm["ttgir"]
            ptx = kern.asm["ptx"]
            waits = re.findall(r"wgmma.wait_group.sync.aligned (\d+)", ptx)
            asyncs = len(re.findall(r"isAsync = true", ttgir))
            dot_waits = re.findall(r"warp_group_dot_wait .*?pendings = (\d+)", ttgir)
            print(f"{mode:7s} {bm}x{bn}x{bk} w{warps} s{stages} ws={ws}: smem {kern.metadata.shared} "
                  f"wgmma {len(re.findall('wgmma.mma_async', ptx))} ptx waits {waits} "
                  f"ttgir async dots {asyncs} dot_wait pendings {dot_waits}, SASS warpgroup waits {sass_waits}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inspect", action="store_true")
    parser.add_argument("--shapes", default="8192x8192x8192,4096x4096x4096,4096x28672x4096,1024x4096x14336")
    parser.add_argument("--json")
    opts = parser.parse_args()
    if opts.inspect:
        inspect()
        return
    run(opts.shapes.split(","), opts.json)


def run(shapes: list[str], out: str | None) -> None:
    import torch

    sys.path.insert(0, "benchmarks")
    from protocol import CudaTimer, Protocol

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    timer = CudaTimer(Protocol(), dev)
    rows = []
    for shape in shapes:
        m, n, k = (int(v) for v in shape.split("x"))
        gen = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(m, k, device=dev, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev, generator=gen).to(torch.float8_e4m3fn)
        ref = (a.double() @ b.double().T)
        unit = torch.ones(1, device=dev)
        flops = 2 * m * n * k
        row = {"shape": shape}
        for fast in (False, True):
            fn = lambda fast=fast: torch._scaled_mm(a, b.T, scale_a=unit, scale_b=unit, out_dtype=torch.bfloat16,
                                                     use_fast_accum=fast)
            err = ((fn().double() - ref).norm() / ref.norm()).item()
            t = timer.time_ms(fn).ms
            row[f"cublas_fast{int(fast)}"] = {"ms": t, "tflops": flops / t / 1e9, "rel_err": err}
            print(f"{shape} cublas fast_accum={fast}: {t*1e3:.1f} us {flops/t/1e9:.0f} TF/s err {err:.2e}", flush=True)
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        for mode, code in MODES.items():
            for bm, bn, bk, warps, stages, ws in TILES:
                progs = min(sms, triton.cdiv(m, bm) * triton.cdiv(n, bn))
                def fn(bm=bm, bn=bn, bk=bk, warps=warps, stages=stages, ws=ws, code=code, progs=progs):
                    fp8_probe_kernel[(progs,)](a, b, c, m, n, k, 1.0, BM=bm, BN=bn, BK=bk, GROUP_M=8,
                                               NUM_SMS=progs, MODE=code, WS=ws, FLAT=not ws,
                                               num_warps=warps, num_stages=stages)
                    return c
                label = f"{mode} {bm}x{bn}x{bk} w{warps} s{stages}{' ws' if ws else ''}"
                try:
                    err = ((fn().double() - ref).norm() / ref.norm()).item()
                    t = timer.time_ms(fn).ms
                except FORM_FAILURES as exc:   # a form Triton cannot compile or fit is recorded; the probe goes on
                    row[label] = {"error": str(exc)[:200]}
                    print(f"{shape} {label}: failed {str(exc)[:200]}", flush=True)
                    continue
                row[label] = {"ms": t, "tflops": flops / t / 1e9, "rel_err": err}
                print(f"{shape} {label}: {t*1e3:.1f} us {flops/t/1e9:.0f} TF/s err {err:.2e}", flush=True)
        rows.append(row)
    if out:
        with open(out, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(dev), "triton": triton.__version__,
                       "torch": torch.__version__, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
