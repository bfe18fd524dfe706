"""Probe: ways to copy a 1-byte (fp8) row-major matrix into the top-left corner of a wider zero-padded buffer
(the padded GEMM plans' operand copy), timed with CUDA events on the GPU.

    python tools/probe_padcopy.py [--shapes 3000x700,5000x700,4095x1023,4097x1023,1000x1000] [--json PATH]
"""
from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl
from profile_padding import event_us   # tools/ is the script's directory


@triton.jit
def pad_copy_kernel(src, dst, rows, cols, src_ld, dst_ld, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    r64 = r.to(tl.int64)
    vals = tl.load(src + r64[:, None] * src_ld + c[None, :], mask=mask)
    tl.store(dst + r64[:, None] * dst_ld + c[None, :], vals, mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="3000x700,5000x700,4095x1023,4097x1023,1000x1000,777x555,3000x5000,4095x4097")
    parser.add_argument("--json")
    opts = parser.parse_args()
    rows_out = []
    for shape in opts.shapes.split(","):
        rows, cols = (int(v) for v in shape.split("x"))
        pad = -(-cols // 16) * 16
        src = torch.randn(rows, cols, device="cuda").to(torch.float8_e4m3fn)
        buf = torch.zeros(rows, pad, device="cuda", dtype=torch.float8_e4m3fn)
        corner = buf[:, :cols]
        s8, c8 = src.view(torch.uint8), corner.view(torch.uint8)
        variants = {
            "copy_fp8": lambda: corner.copy_(src),
            "copy_u8": lambda: c8.copy_(s8),
            "cat_u8": lambda: torch.cat([s8, torch.zeros(rows, pad - cols, dtype=torch.uint8, device="cuda")], 1),
        }
        for br, bc in ((16, 256), (32, 128), (64, 64), (8, 512)):
            grid = (triton.cdiv(rows, br), triton.cdiv(cols, bc))
            variants[f"triton_{br}x{bc}"] = (lambda grid=grid, br=br, bc=bc: pad_copy_kernel[grid](
                s8, c8, rows, cols, cols, pad, BR=br, BC=bc, num_warps=4))
        wide16 = torch.randn(rows, pad, device="cuda", dtype=torch.bfloat16)
        out16 = torch.empty(rows, cols, device="cuda", dtype=torch.bfloat16)
        variants["copy_back_bf16"] = lambda: out16.copy_(wide16[:, :cols])
        row = {"shape": shape, "bytes": rows * cols}
        for name, fn in variants.items():
            fn()
            torch.cuda.synchronize()
            us = event_us(fn, reps=200, warmup=10)
            ok = bool(torch.equal(buf[:, :cols].view(torch.uint8), s8)) if name not in ("cat_u8", "copy_back_bf16") else True
            row[name] = {"us": us, "gbps": 2 * rows * cols / us / 1e3, "ok": ok}
            print(f"{shape:10s} {name:16s} {us:7.1f} us {2 * rows * cols / us / 1e3:7.0f} GB/s ok={ok}", flush=True)
        rows_out.append(row)
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows_out}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
