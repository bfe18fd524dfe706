"""Family `tma`, direction bwd_weight (kloop 'taprow'): the weight gradient over tensor-copy boxes of pixels.

A program owns a (k, c) tile of one group and one filter row (ROW_TAPS accumulators) and walks a range of
output-pixel boxes: per box one dy box and, per tap, the x box shifted by the tap; kernels/conv_wgrad.py's
reduce entries sum the splits. DOTS_DRAINED keeps Triton 3.6 from loading into registers that dots in flight
still read. Design and measurements: docs/design/conv_tma.md.
"""
from __future__ import annotations

import dataclasses
import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels import conv_common as common
from tiledispatch.kernels import conv_tma, conv_wgrad, rules
from tiledispatch.kernels.conv_common import ROW_TAPS
from tiledispatch.kernels.conv_tma import box_of, hints
from tiledispatch.kernels.gemm_common import DOT_F32, signature_text
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.problems.conv import ConvProblem

FN = "conv_tma_wgrad_kernel"
MIN_BOXES_PER_SPLIT = 8     # auto split: each split reduces at least this many boxes
MAX_SPLITS = 1024
MAX_GRID_YZ = rules.MAX_GRID_YZ
INDENT = "    "


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    params = [dataclasses.replace(p, divisibility=ALIGN_BYTES) if p.name in ("x_ptr", "y_ptr", "w_ptr") else p
              for p in common.standard_params(cfg)]
    params += [Param("ws_ptr", "*fp32", divisibility=ALIGN_BYTES), Param("SPLITS", "i32"),
               Param("BPS", "i32"),
               Param("BLOCK_M", "constexpr", cfg.block_m), Param("BLOCK_N", "constexpr", cfg.block_n),
               Param("BLOCK_K", "constexpr", cfg.block_k)]
    params += [Param(f"T_{s}", "constexpr", t)
               for s, t in zip(common.dims(cfg), box_of(cfg.ndim, cfg.block_k))]
    params.append(Param(DOT_F32, "constexpr", False))
    return [EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages), *conv_wgrad.reduce_entries(cfg)]


def render(cfg: ConvConfig) -> str:
    main = entries(cfg)[0]
    body = _prologue(cfg) + _descriptors(cfg) + _loop(cfg) + _store(cfg)
    src = f"@triton.jit\ndef {FN}(\n    {signature_text(list(main.params))},\n):\n" + body
    return "\n\n".join([src, *conv_wgrad.reduce_sources(cfg)])


# -- launch ------------------------------------------------------------------------------------------------
def boxes(cfg: ConvConfig, problem: ConvProblem) -> int:
    """Pixel boxes of the reduction: N x the boxes covering the output."""
    return problem.n * math.prod(-(-o // t) for o, t in zip(problem.output, box_of(cfg.ndim, cfg.block_k)))


def tile_counts(cfg: ConvConfig, problem: ConvProblem) -> tuple[int, int, int]:
    """(tiles_m, tiles_n, filter rows) of grid axis 0."""
    rows = conv_wgrad.filter_spans(cfg, problem)
    return -(-problem.k_per_group // cfg.block_m), -(-problem.c_per_group // cfg.block_n), rows


def split_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> tuple[int, int]:
    """(SPLITS, BPS): box ranges and boxes per range (none empty); split_k 0 fills TARGET_WAVES waves."""
    total = boxes(cfg, problem)
    programs = math.prod(tile_counts(cfg, problem)) * problem.groups
    most = max(1, min(total // MIN_BOXES_PER_SPLIT, MAX_SPLITS, MAX_GRID_YZ))
    wanted = cfg.split_k or common.auto_splits(programs, most, max(1, sms))
    per = -(-total // max(1, min(wanted, total)))
    return -(-total // per), per


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    splits, per = split_plan(cfg, problem, sms)
    elements = problem.k * problem.c_per_group * math.prod(problem.filter)
    grid = (math.prod(tile_counts(cfg, problem)), splits, problem.groups)
    return LaunchPlan((grid, *common.reduce_grids(elements, sms, splits > 1)),
                      scalars=(("SPLITS", splits), ("BPS", per)),
                      workspaces=(("ws_ptr", elements * splits if splits > 1 else 0, "fp32"),))



# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: ConvConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    """Family tma's rules, then the implicit-GEMM weight gradient's."""
    conv_tma.tma_errors(cfg, errors)
    conv_wgrad.config_errors(cfg, arch, errors)


def resources(cfg: ConvConfig) -> Resources:
    return conv_wgrad.resources(cfg)


def problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Filter rows of at most ROW_TAPS taps, the groups on grid axis 2, the boxes within int32."""
    if reason := conv_tma.channel_mismatch(problem) or conv_wgrad.row_mismatch(cfg, problem):
        return reason
    if problem.groups > MAX_GRID_YZ:
        return (f"groups: family 'tma' bwd_weight puts the {problem.groups} groups on a grid axis of "
                f"{MAX_GRID_YZ}")
    return conv_tma.index_mismatch(problem, boxes(cfg, problem))

# -- source pieces -----------------------------------------------------------------------------------------
def _prologue(cfg: ConvConfig) -> str:
    """Hints (C/G, K/G and every non-unit stride are multiples of 8), the program's tile, group and filter row
    (`tap`; f_<s> of the outer dims)."""
    *outer, _ = common.dims(cfg)
    lines = [
        "pid_t = tl.program_id(0)", "pid_s = tl.program_id(1)", "pid_g = tl.program_id(2)",
        "ROW = " + " * ".join(f"flt_{s}" for s in common.dims(cfg)) + " * CG",
        "tiles_m = (KG + BLOCK_M - 1) // BLOCK_M", "tiles_n = (CG + BLOCK_N - 1) // BLOCK_N",
        "tile_m = pid_t % tiles_m", "rest = pid_t // tiles_m", "tile_n = rest % tiles_n",
        "tap = rest // tiles_n",
        "k0 = pid_g * KG + tile_m * BLOCK_M", "c0 = pid_g * CG + tile_n * BLOCK_N"]
    src = hints(cfg) + "".join(f"{INDENT}{line}\n" for line in lines)
    if outer:
        src += common.split_index("t_rest", "tap", [f"flt_{s}" for s in outer], [f"f_{s}" for s in outer],
                                  INDENT)
    return src


def _descriptors(cfg: ConvConfig) -> str:
    ds = common.dims(cfg)
    box = ", ".join(f"T_{s}" for s in ds)

    def desc(name: str, ptr: str, ext: str, stride: str, chans: str, block: str) -> str:
        shape = ", ".join(["N", *(f"{ext}_{s}" for s in ds), chans])
        strides = ", ".join([f"{stride}_n", *(f"{stride}_{s}" for s in ds), "1"])
        return (f"{INDENT}{name} = tl.make_tensor_descriptor({ptr}, shape=[{shape}], strides=[{strides}], "
                f"block_shape=[1, {box}, {block}])\n")

    src = (desc("y_desc", "y_ptr", "out", "sy", "K", "BLOCK_M")
           + desc("x_desc", "x_ptr", "in", "sx", "C", "BLOCK_N"))
    count = ["n_boxes = N"]
    for s in ds:
        count += [f"boxes_{s} = (out_{s} + T_{s} - 1) // T_{s}", f"n_boxes = n_boxes * boxes_{s}"]
    count += ["b_lo = pid_s * BPS", "b_hi = min(b_lo + BPS, n_boxes)"]
    return src + "".join(f"{INDENT}{line}\n" for line in count)


def _loop(cfg: ConvConfig) -> str:
    """Per box: its origin o0_<s> and image q, the dy box, then per unrolled tap j its x box and dot."""
    *outer, inner = common.dims(cfg)
    ind = INDENT * 2
    lines = [f"acc{j} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)" for j in range(ROW_TAPS)]
    src = ("".join(f"{INDENT}{line}\n" for line in lines)
           + f"{INDENT}for b in range(b_lo, b_hi):\n{ind}q = b\n")
    for s in reversed(common.dims(cfg)):
        src += f"{ind}o0_{s} = (q % boxes_{s}) * T_{s}\n{ind}q = q // boxes_{s}\n"
    at = ", ".join(["q", *(f"o0_{s}" for s in common.dims(cfg)), "k0"])
    src += (f"{ind}a = y_desc.load([{at}]).reshape(BLOCK_K, BLOCK_M)\n"
            f"{ind}at = a.T\n")
    shifted = [f"o0_{s} - pad_{s} + f_{s} * dil_{s}" for s in outer]
    for j in range(ROW_TAPS):
        at = ", ".join(["q", *shifted, f"o0_{inner} - pad_{inner} + {j} * dil_{inner}", "c0"])
        src += (f"{ind}b{j} = x_desc.load([{at}]).reshape(BLOCK_K, BLOCK_N)\n"
                + conv_wgrad.dot_lines(cfg, f"acc{j}", f"b{j}"))
    if cfg.ndim == 1:   # a 1-D box is a plain [BLOCK_K, channels] tile: A stays in shared memory
        return src
    last = f"acc{ROW_TAPS - 1}"   # an identity (b >= 0): see DOTS_DRAINED
    return src + f"{ind}{last} = tl.where(b >= 0, {last}, 0.0)\n"


def _store(cfg: ConvConfig) -> str:
    """Per unrolled tap j: dw (SPLITS == 1, out_dtype) or the fp32 partial ws[pid_s, k, tap*CG + c], masked to
    the group's channels and the filter."""
    *outer, inner = common.dims(cfg)
    lines = ["rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)", "rc = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)",
             "k_row = (pid_g * KG + rm).to(tl.int64)", "tile_ok = (rm < KG)[:, None] & (rc < CG)[None, :]",
             "w_row = " + "".join(f"f_{s}.to(tl.int64) * sw_{s} + " for s in outer) + "rc"]
    src = "".join(f"{INDENT}{line}\n" for line in lines)
    out_ty = common.tl_type(cfg.out_dtype)
    for j in range(ROW_TAPS):
        w_off = f"(k_row[:, None] * sw_k + (w_row + {j} * sw_{inner})[None, :])"
        ws_off = f"k_row[:, None] * ROW + ((tap * flt_{inner} + {j}) * CG + rc)[None, :]"
        src += (f"{INDENT}mask{j} = tile_ok & ({j} < flt_{inner})\n"
                + conv_wgrad.store_lines(f"acc{j}", f"mask{j}", w_off, ws_off, out_ty))
    return src
