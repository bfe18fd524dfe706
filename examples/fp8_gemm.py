"""fp8 (e4m3) GEMM with per-tensor scales: out = scale_a * scale_b * (A @ B), bf16 output, fp32 accumulation.

A is row-major [M, K] and B is K-major (a [N, K] tensor transposed: layout rcr), as fp8 tensor cores need.
On a GPU the result is compared with torch._scaled_mm; on CPU tensors it runs on Triton's interpreter and is
compared with a float64 reference.

    python examples/fp8_gemm.py
"""
from __future__ import annotations

import torch

import tiledispatch as td


def quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor scaling into the e4m3 range; returns the fp8 tensor and the scale that undoes it."""
    scale = t.abs().max().clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    return (t / scale).to(torch.float8_e4m3fn), scale.float().reshape(1)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    m, n, k = (4096, 4096, 4096) if device == "cuda" else (64, 48, 96)
    a, sa = quantize(torch.randn(m, k, device=device))
    b, sb = quantize(torch.randn(n, k, device=device))
    out = td.gemm(a, b.t(), scale_a=sa, scale_b=sb)
    if device == "cuda":
        ref = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16).float()
    else:
        ref = (a.double() * sa.double()) @ (b.double() * sb.double()).t()
    rel = float((out.double() - ref.double()).norm() / ref.double().norm())
    print(f"fp8 {m}x{n}x{k} on {device}: out {out.dtype}, relative error vs reference {rel:.2e}")
    assert rel < 1e-2


if __name__ == "__main__":   # builds compile in spawned worker processes
    main()
