"""Family `gemm`: 1x1 convolutions (stride 1, no padding, one group) run as a GEMM over the pixels.

Channels-last tensors with evenly spaced pixels are matrices, so fwd is y = x @ w^T, bwd_data dx = dy @ w and
bwd_weight dw = dy^T @ x; the GEMM family's own kernel runs it, chosen by split_k (`gemm_config`). Design and
measurements: docs/design/conv_gemm.md.
"""
from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.errors import BadInput
from tiledispatch.kernels import gemm_splitk, gemm_tiled, gemm_tma, rules
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Resources
from tiledispatch.problems.conv import ConvProblem

LAYOUTS = {"fwd": "rcr", "bwd_data": "rrr", "bwd_weight": "crr"}
# GEMM operands by forward role: (A, B, out); slots of kernels/conv_common.CONV_SLOTS
ROLES = {"fwd": ("x", "w", "y"), "bwd_data": ("y", "w", "x"), "bwd_weight": ("y", "x", "w")}
_ROLE_SLOT = {"x": 0, "w": 1, "y": 2}
GEMM_MODULES = {"tiled": gemm_tiled, "splitk": gemm_splitk, "tma_persistent": gemm_tma}   # of gemm_config


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
    """The GEMM's alignment in bytes: align 8 (channels multiples of 8) 16-byte rows; align 2 and 4 rows of 2
    and 4 elements (4- and 8-byte vectors of 16-bit types); align 1 nothing."""
    if cfg.align == 8:
        return ALIGN_BYTES
    return cfg.align * DTYPES[cfg.dtype].bytes if cfg.align > 1 else 1


def _gemm_module(cfg: ConvConfig) -> ModuleType:
    return GEMM_MODULES[gemm_config(cfg).family]


def gemm_errors(gemm: GemmConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """The GEMM instance's validity (the GEMM predicate of kernels/family.py), each reason prefixed."""
    found: rules.Errors = []
    rules.gemm_errors(gemm, arch, GEMM_MODULES[gemm.family], found)
    errors.extend((field, f"as GEMM: {reason}") for field, reason in found)


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
            raise BadInput(f"{field} has strides {tuple(t.stride())}: a 1x1 GEMM kernel needs evenly spaced "
                           "pixels (a channels-last tensor without gaps)", field=field)
        expected *= t.shape[dim]
    if t.stride(0) != expected and t.shape[0] != 1:
        raise BadInput(f"{field} has strides {tuple(t.stride())}: a 1x1 GEMM kernel needs evenly spaced "
                       "pixels (a channels-last tensor without gaps)", field=field)
    return step


def extra_values(cfg: ConvConfig, problem: ConvProblem, tensors: dict[str, Any]) -> dict[str, Any]:
    """The GEMM kernel's run-time values: sizes, matrix strides (from the conv tensors' strides), alpha."""
    m, n, k = sizes(problem)
    values: dict[str, Any] = {"M": m, "N": n, "K": k, "alpha": 1.0, "stride_ab": 0, "stride_bb": 0,
                              "stride_ob": 0, "stride_biasb": 0}
    if cfg.direction == "bwd_weight":   # A = dy^T: (K, pixels), K contiguous; B = x: (pixels, C); out = dw
        values.update({"stride_ar": 1, "stride_ac": pixel_stride(tensors["y"], "output"),
                       "stride_br": pixel_stride(tensors["x"], "input"), "stride_bc": 1,
                       "stride_or": tensors["w"].stride(0), "stride_oc": 1})
        return values
    a, b, out = (tensors[role] for role in ROLES[cfg.direction])
    w_rows = b.stride(0)   # weight (K, C, 1..): K x C row-major
    values.update({"stride_ar": pixel_stride(a, "input" if cfg.direction == "fwd" else "output"),
                   "stride_ac": 1,
                   "stride_or": pixel_stride(out, "output" if cfg.direction == "fwd" else "input"),
                   "stride_oc": 1})
    if cfg.direction == "fwd":   # B = w^T: (C, K) with C contiguous (column-major)
        values.update({"stride_br": 1, "stride_bc": w_rows})
    else:                        # B = w: (K, C) row-major
        values.update({"stride_br": w_rows, "stride_bc": 1})
    return values



# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """The GEMM instance must be valid; split_k picks it (gemm_config): fwd / bwd_data 0 (tma_persistent when
    aligned) or, aligned, 1 (tiled); bwd_weight 1 (tiled) or the split-K GEMM family, whose split count
    (split_k >= 2) is fixed at build time."""
    wants = [("groups_per_program", cfg.groups_per_program, 1), ("kloop", cfg.kloop, "tap")]
    if cfg.direction != "bwd_weight":
        if cfg.split_k not in ((0, 1) if cfg.align == 8 else (0,)):
            errors.append(("split_k", (f"family 'gemm' {cfg.direction} runs one GEMM: split_k 0 "
                                       "(tma_persistent when aligned) or, at align 8, 1 (the tiled GEMM); "
                                       f"got {cfg.split_k} at align {cfg.align}")))
    elif cfg.split_k not in (1, *rules.SPLIT_K):
        errors.append(("split_k", ("family 'gemm' bwd_weight splits the pixel reduction over a fixed number "
                                   f"of programs, one of {(1, *rules.SPLIT_K)} (1: unsplit); got "
                                   f"{cfg.split_k}")))
        return
    for field, value, want in wants:
        if value != want:
            errors.append((field, f"family 'gemm' needs {field}={want!r}, got {value!r}"))
    if cfg.dtype in DTYPES and cfg.out_dtype in DTYPES:
        gemm_errors(gemm_config(cfg), arch, errors)


def resources(cfg: ConvConfig) -> Resources:
    return _gemm_module(cfg).resources(gemm_config(cfg))


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    if any(f != 1 for f in problem.filter):
        return f"filter: family 'gemm' computes 1x1 convolutions, not filter {problem.filter}"
    if any(s != 1 for s in problem.stride):
        return f"stride: family 'gemm' needs stride 1, got {problem.stride}"
    if any(p != (0, 0) for p in problem.padding):
        return f"padding: family 'gemm' needs no padding, got {problem.padding}"
    if problem.groups != 1:
        return f"groups: family 'gemm' computes one group, got groups={problem.groups}"
    if problem.direction == "bwd_weight" and cfg.align == 8 and (problem.c % 16 or problem.k % 16):
        return (f"c: family 'gemm' bwd_weight at align 8 runs a GEMM compiled for channel totals that are "
                f"multiples of 16; the problem has C={problem.c}, K={problem.k}")
    return None
