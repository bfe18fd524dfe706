"""Family `gemm`, kloop `im2col`: a forward or weight-gradient convolution as an explicit im2col copy plus a
tensor-copy GEMM.

With cols[p, tap*C + c] = the input pixel that tap reads for output pixel p = (n, o) (zero in the padding), over
the P = N x output pixels:
- fwd: y (P x K) = cols (P x taps*C) @ w^T, w the K x taps*C matrix a channels-last weight is (layout rcr), with
  the bias and activation epilogue of the GEMM family;
- bwd_weight: dw (K x taps*C) = dy^T (K x P) @ cols (layout crr: A read through a transposed descriptor over
  dy's [P, K] rows), split over the pixels by split_k (fp32 partials, the GEMM family's ordered reduce, no
  atomics).

Two launches: `conv_im2col_kernel` writes cols into a workspace in the problem's dtype (a program copies BLOCK_P
pixels x BLOCK_C channels of one tap: 16-byte channel runs, the border mask per pixel), then the GEMM family
`tma_persistent` with the config's tile, warps, stages and split_k. Where the implicit GEMM recomputes pixel
coordinates and border masks in its main loop, the GEMM here runs the index-free tensor-copy loop; the price is
writing and re-reading P x taps x C elements (`IM2COL_MAX_ELEMENTS` bounds the workspace), except for 1x1
convolutions at stride 1 without padding, whose GEMM reads x itself (the copy is not launched). One group only,
channel totals multiples of 16 (16-byte TMA strides and aligned channel runs).
"""
from __future__ import annotations

import math
from typing import Any

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.errors import BadInput
from tiledispatch.kernels.conv_common import dims, multiple_hints, split_index, tap_coords
from tiledispatch.kernels.conv_direct import header, indented
from tiledispatch.kernels.spec import EntrySpec, LaunchPlan, Param
from tiledispatch.problems.conv import ConvProblem

FN = "conv_im2col_kernel"
BLOCK_P = 64                 # pixels per im2col program
BLOCK_C = 64                 # channels per im2col program (128-byte runs of 16-bit elements)
IM2COL_WARPS = 4
IM2COL_MAX_ELEMENTS = 2**28  # workspace bound: 512 MiB of 16-bit elements
DIRECTIONS = ("fwd", "bwd_weight")
LAYOUTS = {"fwd": "rcr", "bwd_weight": "crr"}
# The GEMM operand cols is (the im2col kernel writes its workspace under this parameter name)
COLS = {"fwd": "a_ptr", "bwd_weight": "b_ptr"}
# Per-call tensors of the GEMM operands by conv slot (x 0, w 1, y 2, bias 3). The cols operand maps to x: a 1x1
# convolution at stride 1 without padding (`reads_x`) reads x's pixel rows; otherwise the workspace binding wins
SLOTS = {"fwd": {"x_ptr": 0, "a_ptr": 0, "b_ptr": 1, "out_ptr": 2, "bias_ptr": 3},
         "bwd_weight": {"x_ptr": 0, "a_ptr": 2, "b_ptr": 0, "out_ptr": 1}}


def gemm_config(cfg: ConvConfig) -> GemmConfig:
    """The GEMM instance over cols (every field derives from the conv config's; fwd carries its epilogue)."""
    return GemmConfig(family="tma_persistent", layout=LAYOUTS.get(cfg.direction, "crr"), split_k=cfg.split_k,
                      dtype=cfg.dtype, out_dtype=cfg.out_dtype, acc_dtype=cfg.acc_dtype, block_m=cfg.block_m,
                      block_n=cfg.block_n, block_k=cfg.block_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                      group_m=8, align=16, activation=cfg.activation, bias="col" if cfg.bias else "none")


def _gemm_module(cfg: ConvConfig) -> Any:
    from tiledispatch.kernels import family_module

    return family_module(gemm_config(cfg))


def _im2col_params(cfg: ConvConfig) -> list[Param]:
    ty = "*" + DTYPES[cfg.dtype].triton
    out = [Param("x_ptr", ty, divisible16=True), Param(_cols(cfg), ty, divisible16=True), Param("C", "i32"),
           Param("P", "i32")]
    out += [Param(f"{field}_{s}", "i32") for field in ("in", "out", "flt", "str", "pad", "dil") for s in dims(cfg)]
    out += [Param("sx_n", "i64")] + [Param(f"sx_{s}", "i64") for s in dims(cfg)]
    return out + [Param("BLOCK_P", "constexpr", BLOCK_P), Param("BLOCK_C", "constexpr", BLOCK_C)]


def _cols(cfg: ConvConfig) -> str:
    return COLS.get(cfg.direction, "b_ptr")


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    return [EntrySpec(FN, tuple(_im2col_params(cfg)), IM2COL_WARPS, 1), *_gemm_module(cfg).entries(gemm_config(cfg))]


def _im2col_source(cfg: ConvConfig) -> str:
    ds = dims(cfg)
    taps = " * ".join(f"flt_{s}" for s in ds)
    inside = " & ".join(f"(i_{s} >= 0) & (i_{s} < in_{s})" for s in ds)
    src_off = "n.to(tl.int64) * sx_n + " + " + ".join(f"i_{s}.to(tl.int64) * sx_{s}" for s in ds)
    return (header(entries(cfg)[0])
            + indented(*multiple_hints(["C"], 16), "c_tiles = (C + BLOCK_C - 1) // BLOCK_C",
                       "tap = tl.program_id(1) // c_tiles",
                       "rc = (tl.program_id(1) % c_tiles) * BLOCK_C + tl.arange(0, BLOCK_C)", "c_ok = rc < C")
            + tap_coords(cfg, "tap", "    ")
            + indented("p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)", "p_ok = p < P")
            + split_index("q", "p", ["N"] + [f"out_{s}" for s in ds], ["n"] + [f"o_{s}" for s in ds], "    ")
            + indented(*(f"i_{s} = o_{s} * str_{s} - pad_{s} + f_{s} * dil_{s}" for s in ds),
                       f"ok = p_ok & {inside}", f"src = tl.multiple_of({src_off}, 8)",
                       "v = tl.load(x_ptr + src[:, None] + rc[None, :], mask=ok[:, None] & c_ok[None, :], other=0.0)",
                       f"row = ({taps} * C).to(tl.int64)", "dst = tl.multiple_of(p.to(tl.int64) * row + tap * C, 16)",
                       f"tl.store({_cols(cfg)} + dst[:, None] + rc[None, :], v, mask=p_ok[:, None] & c_ok[None, :])"))


def render(cfg: ConvConfig) -> str:
    return _im2col_source(cfg) + "\n\n" + _gemm_module(cfg).render(gemm_config(cfg))


def pixels(problem: ConvProblem) -> int:
    return problem.n * math.prod(problem.output)


def sizes(problem: ConvProblem) -> tuple[int, int, int]:
    """(M, N, K) of the GEMM: fwd pixels x output channels x taps*input channels; bwd_weight output channels x
    taps*input channels x pixels."""
    cols = math.prod(problem.filter) * problem.c
    if problem.direction == "fwd":
        return pixels(problem), problem.k, cols
    return problem.k, cols, pixels(problem)


def reads_x(problem: ConvProblem) -> bool:
    """A 1x1 convolution at stride 1 without padding: cols is x itself (N x pixels rows of C channels)."""
    return (all(f == 1 for f in problem.filter) and all(s == 1 for s in problem.stride)
            and all(p == (0, 0) for p in problem.padding))


def workspace_elements(problem: ConvProblem) -> int:
    """Elements of the cols workspace (0 when the GEMM reads x itself)."""
    return 0 if reads_x(problem) else pixels(problem) * math.prod(problem.filter) * problem.c


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    m, n, k = sizes(problem)
    gemm = _gemm_module(cfg).launch_plan(gemm_config(cfg), m, n, k, 1, sms)
    if reads_x(problem):   # an empty grid: the copy is not launched
        return LaunchPlan(((0, 1, 1), *gemm.grids), scalars=gemm.scalars, workspaces=gemm.workspaces)
    grid = (-(-pixels(problem) // BLOCK_P), math.prod(problem.filter) * -(-problem.c // BLOCK_C), 1)
    return LaunchPlan((grid, *gemm.grids), scalars=gemm.scalars,
                      workspaces=((_cols(cfg), workspace_elements(problem), cfg.dtype), *gemm.workspaces))


def slots(cfg: ConvConfig) -> dict[str, int]:
    return dict(SLOTS.get(cfg.direction, SLOTS["bwd_weight"]))


def extra_values(cfg: ConvConfig, problem: ConvProblem, tensors: dict[str, Any]) -> dict[str, Any]:
    """The GEMM's sizes and strides and the im2col's P. fwd: A = cols, B = w^T, out = y; bwd_weight: A = dy^T,
    B = cols, out = dw."""
    m, n, k = sizes(problem)
    w = tensors["w"]
    _check_weight_rows(w, problem)
    y_rows = _rows(tensors["y"], "output")
    cols_rows = _rows(tensors["x"], "input") if reads_x(problem) else math.prod(problem.filter) * problem.c
    values = {"M": m, "N": n, "K": k, "P": pixels(problem), "alpha": 1.0, "stride_ab": 0, "stride_bb": 0,
              "stride_ob": 0}
    if problem.direction == "fwd":
        return {**values, "stride_ar": cols_rows, "stride_ac": 1, "stride_br": 1, "stride_bc": w.stride(0),
                "stride_or": y_rows, "stride_oc": 1, "stride_biasb": 0}
    return {**values, "stride_ar": 1, "stride_ac": y_rows, "stride_br": cols_rows, "stride_bc": 1,
            "stride_or": w.stride(0), "stride_oc": 1}


def _rows(t: Any, field: str) -> int:
    """The pixel stride of a channels-last activation the GEMM reads or writes as a matrix (16-byte rows)."""
    from tiledispatch.kernels.conv_gemm import pixel_stride

    step = pixel_stride(t, field)
    if step % 8:
        raise BadInput(f"{field} has strides {tuple(t.stride())}: the tensor-copy GEMM takes its pixels as rows "
                       "whose stride is a multiple of 8 elements (16 bytes)", field=field)
    return step


def _check_weight_rows(w: Any, problem: ConvProblem) -> None:
    """The GEMM reads (fwd) or writes (bwd_weight) w as a K x taps*C matrix: each output channel's (tap, c)
    elements contiguous, tap-major (a channels-last weight without gaps), rows 16 bytes apart."""
    expected, step = [], problem.c
    for size in reversed(problem.filter):
        expected.append(step)
        step *= size
    want = (1, *reversed(expected))
    have = tuple(w.stride())[1:]
    if have != want or w.stride(0) % 8:
        raise BadInput(f"weight has strides {tuple(w.stride())}: the im2col GEMM takes each output channel's "
                       f"taps x channels as one row (strides {want} after the first, a row stride that is a "
                       "multiple of 8); pass a contiguous channels-last weight", field="weight")


# (block_m, block_n, block_k, warps, stages, split_k) per direction: bwd_weight wide tiles for many columns
# (taps x C) and split reductions for few tiles; fwd the large-tile GEMM shapes (many pixels, K <= 512 columns)
_CANDIDATES = {
    "bwd_weight": ((128, 128, 64, 8, 3, 1), (128, 256, 64, 8, 3, 1), (128, 128, 64, 8, 3, 2),
                   (128, 128, 64, 8, 3, 4), (64, 128, 64, 4, 4, 4), (64, 128, 64, 4, 4, 16), (128, 256, 64, 8, 3, 2)),
    "fwd": ((128, 128, 64, 8, 4, 1), (128, 256, 64, 8, 3, 1), (128, 64, 64, 4, 4, 1), (64, 128, 64, 4, 4, 1)),
}


def candidate_configs(dtype: str, ndim: int, direction: str = "bwd_weight") -> list[ConvConfig]:
    """Tiles for the presets of one direction."""
    return [ConvConfig(family="gemm", direction=direction, ndim=ndim, dtype=dtype, block_m=bm, block_n=bn,
                       block_k=bk, num_warps=w, num_stages=s, split_k=split, kloop="im2col", align=8)
            for bm, bn, bk, w, s, split in _CANDIDATES[direction]]
