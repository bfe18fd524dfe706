"""Family `gemm`: 1x1 convolutions (stride 1, no padding, one group) run as a GEMM over the pixels.

Channels-last tensors whose pixels are evenly spaced are matrices: the input is (N*pixels) x C row-major, the
output (N*pixels) x K, and the weight (K, C, 1..) is K x C row-major. fwd: y = x @ w^T (layout rcr);
bwd_data: dx = dy @ w (rrr); bwd_weight: dw = dy^T @ x (crr), a K x C result reduced over every pixel. The
instance is the GEMM family's own kernel built from the conv config's tile fields, chosen by split_k: 0 (fwd /
bwd_data) tma_persistent for aligned problems, tiled otherwise; 1 the tiled GEMM (pointer loads; aligned
problems too: 16-byte rows are all it needs); >= 2 (bwd_weight) splitk with that split count (its fp32 partials
summed by the GEMM family's deterministic reduce). Few pixels favour tiled: on ResNet-50's 7x7 layers, 32 x 49
pixels, the 2048 x 512 weight gradient took 8.3 us on tiled 64x128 against 14.1 us on tma_persistent 128x128
and 13.4 + 4.8 us split 4 ways (H200 device times). Align 2 and 4 (channel totals multiples of 2 or 4) run the
pointer-loading GEMMs compiled for rows of that many elements (`gemm_align`: 4- and 8-byte vectors of 16-bit
types instead of single elements): x3d's 54 -> 24-channel pointwise fwd took 44.8 us at align 2 against 85.1 us
at align 1 (H200 event times).
"""
from __future__ import annotations

import math
from typing import Any

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.errors import BadInput
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan
from tiledispatch.problems.conv import ConvProblem

LAYOUTS = {"fwd": "rcr", "bwd_data": "rrr", "bwd_weight": "crr"}
# GEMM operands by forward role: (A, B, out); slots of kernels/conv_common.CONV_SLOTS
ROLES = {"fwd": ("x", "w", "y"), "bwd_data": ("y", "w", "x"), "bwd_weight": ("y", "x", "w")}
_ROLE_SLOT = {"x": 0, "w": 1, "y": 2}


def gemm_config(cfg: ConvConfig) -> GemmConfig:
    """The GEMM instance a `gemm` conv config runs (every field derives from the conv config's)."""
    if cfg.split_k >= 2:
        family = "splitk"
    elif cfg.split_k == 1 or cfg.align != 8:
        family = "tiled"
    else:
        family = "tma_persistent"
    split = max(cfg.split_k, 1)
    return GemmConfig(family=family, layout=LAYOUTS.get(cfg.direction, "rcr"), split_k=split,
                      dtype=cfg.dtype, out_dtype=cfg.out_dtype, acc_dtype=cfg.acc_dtype, block_m=cfg.block_m,
                      block_n=cfg.block_n, block_k=cfg.block_k, num_warps=cfg.num_warps,
                      num_stages=cfg.num_stages, group_m=8, align=gemm_align(cfg),
                      activation=cfg.activation, bias="col" if cfg.bias else "none")


def gemm_align(cfg: ConvConfig) -> int:
    """The GEMM's alignment in bytes: align 8 (channels multiples of 8) 16-byte rows; align 2 and 4 rows of 2 and
    4 elements (4- and 8-byte vectors of 16-bit types); align 1 nothing."""
    if cfg.align == 8:
        return ALIGN_BYTES
    return cfg.align * DTYPES[cfg.dtype].bytes if cfg.align > 1 else 1


def _gemm_module(cfg: ConvConfig) -> Any:
    from tiledispatch.kernels import family_module

    return family_module(gemm_config(cfg))


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    return _gemm_module(cfg).entries(gemm_config(cfg))


def render(cfg: ConvConfig) -> str:
    return _gemm_module(cfg).render(gemm_config(cfg))


def sizes(problem: ConvProblem) -> tuple[int, int, int]:
    """(M, N, K) of the GEMM: pixels x output channels x input channels (bwd_data: pixels x C x K; bwd_weight:
    K x C x pixels)."""
    pixels = problem.n * math.prod(problem.spatial)
    if problem.direction == "fwd":
        return pixels, problem.k, problem.c
    if problem.direction == "bwd_weight":
        return problem.k, problem.c, pixels
    return pixels, problem.c, problem.k


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    m, n, k = sizes(problem)
    return _gemm_module(cfg).launch_plan(gemm_config(cfg), m, n, k, 1, sms)


def slots(cfg: ConvConfig) -> dict[str, int]:
    a, b, out = ROLES[cfg.direction]
    return {"a_ptr": _ROLE_SLOT[a], "b_ptr": _ROLE_SLOT[b], "out_ptr": _ROLE_SLOT[out], "bias_ptr": 3}


def pixel_stride(t: Any, field: str) -> int:
    """The stride between consecutive pixels of a channels-last tensor whose pixels are evenly spaced."""
    step = t.stride(-1)
    expected = step
    for dim in range(t.dim() - 1, 1, -1):
        if t.stride(dim) != expected and t.shape[dim] != 1:
            raise BadInput(f"{field} has strides {tuple(t.stride())}: a 1x1 GEMM kernel needs evenly spaced pixels "
                           "(a channels-last tensor without gaps)", field=field)
        expected *= t.shape[dim]
    if t.stride(0) != expected and t.shape[0] != 1:
        raise BadInput(f"{field} has strides {tuple(t.stride())}: a 1x1 GEMM kernel needs evenly spaced pixels "
                       "(a channels-last tensor without gaps)", field=field)
    return step


def extra_values(cfg: ConvConfig, problem: ConvProblem, tensors: dict[str, Any]) -> dict[str, Any]:
    """The GEMM kernel's run-time values: sizes, matrix strides (from the conv tensors' strides), alpha."""
    m, n, k = sizes(problem)
    values: dict[str, Any] = {"M": m, "N": n, "K": k, "alpha": 1.0, "stride_ab": 0, "stride_bb": 0, "stride_ob": 0,
                              "stride_biasb": 0}
    if cfg.direction == "bwd_weight":   # A = dy^T: (K, pixels), K contiguous; B = x: (pixels, C); out = dw
        values.update({"stride_ar": 1, "stride_ac": pixel_stride(tensors["y"], "output"),
                       "stride_br": pixel_stride(tensors["x"], "input"), "stride_bc": 1,
                       "stride_or": tensors["w"].stride(0), "stride_oc": 1})
        return values
    a, b, out = (tensors[role] for role in ROLES[cfg.direction])
    w_rows = b.stride(0)   # weight (K, C, 1..): K x C row-major
    values.update({"stride_ar": pixel_stride(a, "input" if cfg.direction == "fwd" else "output"),
                   "stride_ac": 1, "stride_or": pixel_stride(out, "output" if cfg.direction == "fwd" else "input"),
                   "stride_oc": 1})
    if cfg.direction == "fwd":   # B = w^T: (C, K) with C contiguous (column-major)
        values.update({"stride_br": 1, "stride_bc": w_rows})
    else:                        # B = w: (K, C) row-major
        values.update({"stride_br": w_rows, "stride_bc": 1})
    return values
