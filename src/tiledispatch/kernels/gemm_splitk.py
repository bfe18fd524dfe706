"""Family `splitk`: K split over SPLIT_K programs into an fp32/int32 workspace, then a deterministic
reduce (fixed summation order, no atomics) that also runs the fused epilogue."""
from __future__ import annotations

import dataclasses

from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param

PARTIAL_FN = "gemm_splitk_partial_kernel"
REDUCE_FN = "gemm_splitk_reduce_kernel"
REDUCE_ELEMENTS_PER_THREAD = 32   # of the reduce's accumulator tile: 4 warps for its 32x128 tile
# The reduce's own tile, at most REDUCE_TILE (rows, columns): a memory-bound pass wants many small programs.
# With the partial kernel's tile (e.g. 256x128 over 16 warps, SPLIT_K loads in flight) it spilled and took 52 us
# of a 77 us call on a 256x3584x3584 bf16 GEMM (H200), with 28 programs for 132 SMs.
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


def entries(cfg: GemmConfig) -> list[EntrySpec]:
    partial = [
        common.ptr("a_ptr", cfg.dtype, cfg.align), common.ptr("b_ptr", cfg.dtype, cfg.align),
        common.ptr("ws_ptr", cfg.acc_dtype, ALIGN_BYTES),
        *common.size_params(cfg, "MNK"), WS_LD,
        *common.operand_params(cfg), *common.tile_constexprs(cfg), split_param(cfg),
    ]
    return [EntrySpec(PARTIAL_FN, tuple(partial), cfg.num_warps, cfg.num_stages), reduce_entry(cfg)]


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
    partial, _ = entries(cfg)
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
    return partial_src + "\n\n" + reduce_source(cfg)


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
        + "    for s in tl.static_range(SPLIT_K):\n"
        + "        acc += tl.load(ws_tile + (pid_b.to(tl.int64) * SPLIT_K + s) * ws_step, mask=ws_mask, other=0)\n"
        + common.epilogue(cfg)
    )


def reduce_plan(cfg: GemmConfig, m: int, n: int, batch: int) -> tuple[tuple[int, int, int], tuple[str, int, str],
                                                                    tuple[str, int]]:
    """The reduce's grid (output tiles x batches), the workspace ws[batch, SPLIT_K, M, WS_LD] it sums and the
    WS_LD scalar (one place for the workspace layout of splitk and split tma_persistent)."""
    row = ws_ld(n)
    return (common.tile_count(reduce_config(cfg), m, n), batch, 1), ("ws_ptr", batch * cfg.split_k * m * row, cfg.acc_dtype), ("WS_LD", row)


def launch_plan(cfg: GemmConfig, m: int, n: int, k: int, batch: int, sms: int) -> LaunchPlan:
    grid, workspace, row = reduce_plan(cfg, m, n, batch)
    return LaunchPlan(((common.tile_count(cfg, m, n), cfg.split_k, batch), grid), scalars=(row,),
                      workspaces=(workspace,))
