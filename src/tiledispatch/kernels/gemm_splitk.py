"""Family `splitk`: K split over SPLIT_K programs into an fp32/int32 workspace whose slots are summed in a
fixed order (deterministic, no floating-point atomics) before the fused epilogue runs.

Up to SERIAL_SPLITS splits it is one launch: each program stores its partial tile, counts its arrival in the
tile's counter (LaunchPlan.counters) and the last to arrive sums the tile's slots and runs the epilogue. More
splits (few output tiles over very long reductions) run a separate reduce, folded first beyond
MAX_UNROLLED_SPLITS: one program summing dozens of slots would leave the GPU idle."""
from __future__ import annotations

import dataclasses

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.fields import choice
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels import rules
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.kernels.tma_common import indent_block as indent
from tiledispatch.problems.gemm import GemmProblem

PARTIAL_FN = "gemm_splitk_partial_kernel"
REDUCE_FN = "gemm_splitk_reduce_kernel"
FOLD_FN = "gemm_splitk_fold_kernel"
REDUCE_ELEMENTS_PER_THREAD = 32   # of the reduce's accumulator tile: 4 warps for its 32x128 tile
# The reduce's own tile, at most REDUCE_TILE (rows, columns): a memory-bound pass wants many small programs.
# With the partial kernel's tile (e.g. 256x128 over 16 warps, SPLIT_K loads in flight) it spilled and took 52
# us of a 77 us call on a 256x3584x3584 bf16 GEMM (H200), with 28 programs for 132 SMs.
REDUCE_TILE = (32, 128)


def reduce_config(cfg: GemmConfig) -> GemmConfig:
    """cfg with the reduce's tile: the partial kernel's, cut to REDUCE_TILE."""
    return dataclasses.replace(cfg, block_m=min(cfg.block_m, REDUCE_TILE[0]),
                               block_n=min(cfg.block_n, REDUCE_TILE[1]))


def reduce_warps(cfg: GemmConfig) -> int:
    """Warps of the reduce: enough that its fp32 tile and the slots being added stay in registers."""
    tile = reduce_config(cfg)
    return min(16, max(4, tile.block_m * tile.block_n // (32 * REDUCE_ELEMENTS_PER_THREAD)))


def split_param(cfg: GemmConfig) -> Param:
    return Param("SPLIT_K", "constexpr", cfg.split_k)


# the workspace's row length: N rounded up to 16 elements, so its rows are 64-byte aligned and the partial
# stores and reduce loads vectorize whatever N is (the output's own stride may be only 16-byte aligned)
WS_ROW_MULTIPLE = 16
WS_LD = Param("WS_LD", "i32", divisibility=WS_ROW_MULTIPLE)


def ws_ld(n: int) -> int:
    return -(-n // WS_ROW_MULTIPLE) * WS_ROW_MULTIPLE


# The most splits summed by the last-arriving program of a tile (one launch); beyond, a separate reduce. The
# GEMV-like shapes it serves split 4-16 ways (H200: the reduce launch cost 2-3 us of a 25-45 us call).
SERIAL_SPLITS = 16


def is_serial(cfg: GemmConfig) -> bool:
    return cfg.split_k <= SERIAL_SPLITS


def entries(cfg: GemmConfig) -> list[EntrySpec]:
    serial = is_serial(cfg)   # the partial kernel runs the epilogue too
    epilogue_ptrs = ([common.ptr("out_ptr", cfg.out_dtype, cfg.align), *common.epilogue_pointer_params(cfg),
                      Param("count_ptr", "*i32")] if serial else [])
    partial = [
        common.ptr("a_ptr", cfg.dtype, cfg.align), common.ptr("b_ptr", cfg.dtype, cfg.align),
        common.ptr("ws_ptr", cfg.acc_dtype, ALIGN_BYTES), *epilogue_ptrs,
        *common.size_params(cfg, "MNK"), WS_LD, *common.operand_params(cfg),
        *(common.epilogue_scalar_params(cfg) if serial else []), *common.tile_constexprs(cfg),
        split_param(cfg),
    ]
    main = EntrySpec(PARTIAL_FN, tuple(partial), cfg.num_warps, cfg.num_stages)
    if serial:
        return [main]
    return [main, fold_entry(cfg), reduce_entry(cfg)] if is_folded(cfg) else [main, reduce_entry(cfg)]


def reduce_entry(cfg: GemmConfig) -> EntrySpec:
    """The entry that sums the SPLIT_K partial tiles of ws[batch, split, M, WS_LD] in split order and runs the
    epilogue (shared with the split tma_persistent kernels)."""
    reduce = [
        common.ptr("ws_ptr", cfg.acc_dtype, ALIGN_BYTES), common.ptr("out_ptr", cfg.out_dtype, cfg.align),
        *common.epilogue_pointer_params(cfg), *common.size_params(cfg, "MN"), WS_LD,
        *common.epilogue_scalar_params(cfg), *common.tile_constexprs(reduce_config(cfg)), split_param(cfg),
    ]
    return EntrySpec(REDUCE_FN, tuple(reduce), reduce_warps(cfg), 1)


def workspace_offsets(indent: str = "    ") -> str:
    """rm64 / rn64, ws_tile (the tile's element offsets in one [M, WS_LD] slot of the workspace), ws_mask and
    ws_step (the slot size). ws_mask bounds columns by WS_LD, a multiple of 16, not by N: the partials store
    and the reduce loads whole 16-byte vectors (N itself may be odd); columns N..WS_LD hold partial sums of
    zero-filled or repeated B columns, which the reduce reads but never writes out."""
    lines = ["rm64 = rm.to(tl.int64)", "rn64 = rn.to(tl.int64)",
             "ws_mask = (rm[:, None] < M) & (rn[None, :] < WS_LD)",
             "ws_tile = ws_ptr + rm64[:, None] * WS_LD + rn64[None, :]", "ws_step = M.to(tl.int64) * WS_LD"]
    return "".join(f"{indent}{line}\n" for line in lines)


def render(cfg: GemmConfig) -> str:
    partial = entries(cfg)[0]
    partial_src = (
        f"@triton.jit\ndef {PARTIAL_FN}(\n    {common.signature_text(list(partial.params))},\n):\n"
        "    pid_s = tl.program_id(1)\n    pid_b = tl.program_id(2)\n"
        + common.SWIZZLE
        + "    k_span = ((K + SPLIT_K - 1) // SPLIT_K + BLOCK_K - 1) // BLOCK_K * BLOCK_K\n"
        + common.main_loop(cfg, "pid_s * k_span",
                           "min(k_first + k_span, K)")
        + workspace_offsets()
        + "    slot = pid_b.to(tl.int64) * SPLIT_K + pid_s\n"
        + "    tl.store(ws_tile + slot * ws_step, acc, mask=ws_mask)\n"
    )
    if is_serial(cfg):
        return partial_src + _serial_reduce(cfg)
    return "\n\n".join([partial_src, *([fold_source(cfg)] if is_folded(cfg) else []), reduce_source(cfg)])


def _serial_reduce(cfg: GemmConfig) -> str:
    """The last-arriving program of the tile (counter: batch, then tile) sums its slots in split order and
    runs the epilogue."""
    zero = "0" if cfg.acc_dtype == "int32" else "0.0"
    first = "ws_tile + pid_b.to(tl.int64) * SPLIT_K * ws_step"
    return (common.last_arrival("pid_b * tl.num_programs(0) + pid", first, f"{first} + s * ws_step", "    ",
                                f"mask=ws_mask, other={zero}, ")
            + indent(common.epilogue(cfg), "    "))


# Split counts up to MAX_UNROLLED_SPLITS are summed by the reduce's unrolled loop alone. More (few output
# tiles over very long reductions, e.g. 1x1 weight gradients over millions of pixels) are first folded: an
# entry sums each run of FOLD consecutive slots into the run's first slot, over a grid of (tiles, SPLIT_K /
# FOLD), and the reduce sums those; on x3d res2.0.conv_a's 54 x 24 weight gradient (two reduce programs) one
# reduce over 128 slots took 28 us against a 77 us partial pass, the fold and the reduce 4.2 + 2.0 us (H200
# device times). The order of the sums is still fixed.
MAX_UNROLLED_SPLITS = 64
FOLD = 16


def is_folded(cfg: GemmConfig) -> bool:
    return cfg.split_k > MAX_UNROLLED_SPLITS


def reduce_loop(cfg: GemmConfig) -> str:
    """The reduce's slots: every one, or the first of every FOLD run (folded instances)."""
    return f"tl.static_range(0, SPLIT_K, {FOLD})" if is_folded(cfg) else "tl.static_range(SPLIT_K)"


def fold_entry(cfg: GemmConfig) -> EntrySpec:
    fold = [common.ptr("ws_ptr", cfg.acc_dtype, ALIGN_BYTES), *common.size_params(cfg, "MN"), WS_LD,
            *common.tile_constexprs(reduce_config(cfg)), split_param(cfg)]
    return EntrySpec(FOLD_FN, tuple(fold), reduce_warps(cfg), 1)


def fold_source(cfg: GemmConfig) -> str:
    """Slot g * FOLD of ws[batch, SPLIT_K, M, WS_LD] += slots g * FOLD + 1 .. (g + 1) * FOLD - 1, in order."""
    entry = fold_entry(cfg)
    acc_ty = common.TL_TYPES[cfg.acc_dtype]
    return (
        f"@triton.jit\ndef {FOLD_FN}(\n    {common.signature_text(list(entry.params))},\n):\n"
        "    pid_f = tl.program_id(1)\n    pid_b = tl.program_id(2)\n"
        + common.SWIZZLE
        + workspace_offsets()
        + f"    first = ws_tile + (pid_b.to(tl.int64) * SPLIT_K + pid_f * {FOLD}) * ws_step\n"
        + f"    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={acc_ty})\n"
        + f"    for s in tl.static_range({FOLD}):\n"
        + "        acc += tl.load(first + s * ws_step, mask=ws_mask, other=0)\n"
        + "    tl.store(first, acc, mask=ws_mask)\n"
    )


def reduce_source(cfg: GemmConfig) -> str:
    """The reduce on its own tile (reduce_config): SWIZZLE and the epilogue read BLOCK_M / BLOCK_N from its
    constexprs."""
    reduce = reduce_entry(cfg)
    acc_ty = common.TL_TYPES[cfg.acc_dtype]
    return (
        f"@triton.jit\ndef {REDUCE_FN}(\n    {common.signature_text(list(reduce.params))},\n):\n"
        "    pid_b = tl.program_id(1)\n"
        + common.SWIZZLE
        + workspace_offsets()
        + f"    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={acc_ty})\n"
        + f"    for s in {reduce_loop(cfg)}:\n"
        + "        acc += tl.load(ws_tile + (pid_b.to(tl.int64) * SPLIT_K + s) * ws_step, mask=ws_mask, "
          "other=0)\n"
        + common.epilogue(cfg)
    )


def reduce_plan(cfg: GemmConfig, m: int, n: int,
                batch: int) -> tuple[tuple[int, int, int], tuple[str, int, str], tuple[str, int]]:
    """The reduce's grid (output tiles x batches), the workspace ws[batch, SPLIT_K, M, WS_LD] it sums and the
    WS_LD scalar (one place for the workspace layout of splitk and split tma_persistent)."""
    row = ws_ld(n)
    workspace = ("ws_ptr", batch * cfg.split_k * m * row, cfg.acc_dtype)
    return (common.tile_count(reduce_config(cfg), m, n), batch, 1), workspace, ("WS_LD", row)


def launch_plan(cfg: GemmConfig, m: int, n: int, k: int, batch: int, sms: int) -> LaunchPlan:
    grid, workspace, row = reduce_plan(cfg, m, n, batch)
    tiles = common.tile_count(cfg, m, n)
    if is_serial(cfg):
        return LaunchPlan(((tiles, cfg.split_k, batch),), scalars=(row,), workspaces=(workspace,),
                          counters=(("count_ptr", tiles * batch),))
    folds = ((grid[0], cfg.split_k // FOLD, batch),) if is_folded(cfg) else ()
    return LaunchPlan(((tiles, cfg.split_k, batch), *folds, grid), scalars=(row,), workspaces=(workspace,))


# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: GemmConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    choice(errors, "split_k", cfg.split_k, rules.SPLIT_K)
    rules.subtile_errors(cfg, errors, subtiles=False)


def problem_mismatch(cfg: GemmConfig, problem: GemmProblem) -> str | None:
    """The splits share grid dim 1 with the batch."""
    return rules.grid_mismatch(problem.batch * cfg.split_k)


def resources(cfg: GemmConfig) -> Resources:
    """The pipelined A and B tiles of the partial kernel; every warp holds accumulators."""
    return rules.tile_resources(cfg, cfg.num_warps)
