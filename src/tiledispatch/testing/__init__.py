"""Helpers shared by the test lanes: operands in any layout, poisoned outputs, reference checks, and the
small kernel configs the CPU lane builds. torch is imported lazily (importing this module is cheap)."""
from __future__ import annotations

from typing import Any

from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import torch_dtype
from tiledispatch.runtime.arguments import GemmArgs

# Per-element limits |out - ref| <= tol * (|ref| + rms(ref)), on top of the norm-wise TOLERANCES of
# runtime.reference: a single wrong element hides in a norm, not here.
ELEMENT_TOL = {"fp16": 4e-3, "bf16": 2.5e-2, "fp32": 2e-5, "tf32": 1e-2, "int8": 0.0, "fp8e4m3": 2.5e-2}
INT32_POISON = -(2**31)


def small_config(family: str = "tiled", layout: str = "rcr", dtype: str = "fp16", *,
                 block: tuple[int, int, int] =
                 (32, 32, 32), warps: int = 4, stages: int = 2, group_m: int = 8, split_k: int | None = None,
                 align: int = 1, out_dtype: str = "", **epilogue: Any) -> GemmConfig:
    """A cheap-to-compile, cheap-to-interpret config (small tiles, 2 stages, unaligned by default); split_k
    defaults to 2 for the splitk family and 1 for the others."""
    bm, bn, bk = block
    split = split_k if split_k is not None else (2 if family == "splitk" else 1)
    return GemmConfig(family=family, layout=layout, dtype=dtype, out_dtype=out_dtype, block_m=bm, block_n=bn,
                      block_k=bk, num_warps=warps, num_stages=stages, group_m=group_m, split_k=split,
                      align=align, **epilogue)


def matrix(rows: int, cols: int, *, letter: str = "r", dtype: str = "fp16", batch: int | None = None,
           ld_pad: int = 0, device: Any = "cpu", generator: Any = None, scale: float = 1.0) -> Any:
    """A rows x cols (or batch x rows x cols) matrix, row- ('r') or column-major ('c'), whose leading
    dimension is padded by `ld_pad` elements (a strided view of a larger buffer). Random normal data,
    small random integers for int8 / int32."""
    import torch

    lead = (batch,) if batch is not None else ()
    storage = (rows, cols + ld_pad) if letter == "r" else (cols, rows + ld_pad)
    shape = (*lead, *storage)
    if dtype == "int8":
        t = torch.randint(-8, 8, shape, generator=generator, dtype=torch.int8)
    elif dtype == "int32":
        t = torch.randint(-100, 100, shape, generator=generator, dtype=torch.int32)
    else:
        t = (torch.randn(shape, generator=generator) * scale).to(torch_dtype(dtype))
    t = t.to(device)
    if letter == "r":
        return t[..., :cols]
    return t[..., :rows].transpose(-1, -2)


def vector(length: int, *, dtype: str, batch: int | None = None, device: Any = "cpu",
           generator: Any = None) -> Any:
    import torch

    shape = (batch, length) if batch is not None else (length,)
    if dtype == "int32":
        return torch.randint(-100, 100, shape, generator=generator, dtype=torch.int32).to(device)
    return (torch.randn(shape, generator=generator) * 2).to(torch_dtype(dtype)).to(device)


def poisoned(shape: tuple[int, ...], out_dtype: str, device: Any = "cpu") -> Any:
    """An output buffer whose every element is NaN (floats) or INT32_POISON: any element a kernel
    fails to write is caught by the reference comparison."""
    import torch

    if out_dtype == "int32":
        return torch.full(shape, INT32_POISON, dtype=torch.int32, device=device)
    return torch.full(shape, float("nan"), dtype=torch_dtype(out_dtype), device=device)


def check_against_reference(out: Any, args: GemmArgs, dtype: str) -> dict:
    """Assert `out` matches the float64 reference: norm-wise (runtime.reference.validate, TOLERANCES) and
    element-wise (ELEMENT_TOL), with no NaN / poison left. Returns the validation metrics."""
    import torch

    from tiledispatch.testing.reference import reference, validate

    metrics = validate(out, args, dtype)
    ref = reference(args)
    got = out.detach().to("cpu", torch.float64)
    assert got.shape == ref.shape, f"shape {tuple(got.shape)} != reference {tuple(ref.shape)}"
    assert not torch.isnan(got).any(), f"{int(torch.isnan(got).sum())} elements left unwritten (NaN)"
    if out.dtype == torch.int32:
        assert not (out == INT32_POISON).any(), f"{int((out == INT32_POISON).sum())} elements left unwritten"
    assert metrics["passed"], f"norm-wise check failed: {metrics}"
    rms = float(ref.pow(2).mean().sqrt()) if ref.numel() else 0.0
    limit = ELEMENT_TOL[dtype] * (ref.abs() + rms)
    bad = (got - ref).abs() > limit
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} elements off; worst at "
                           f"{tuple(int(i) for i in torch.nonzero(bad)[0])}: {metrics}")
    return metrics
