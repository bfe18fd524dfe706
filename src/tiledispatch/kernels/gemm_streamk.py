"""Family `streamk`: data-parallel persistent waves, then stream-K over the remaining tiles.

The first DP_TILES tiles are computed whole as tma_persistent does; the K iterations of the rest are cut into
equal ranges, one per lane of programs, whose fp32 partials a fixup kernel sums in a fixed order before the
epilogue (deterministic, no atomics). Design and measurements: docs/design/gemm.md.
"""
from __future__ import annotations

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels import gemm_tma, rules
from tiledispatch.kernels import tma_common as tma
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.problems.gemm import GemmProblem

MAIN_FN = "gemm_streamk_kernel"
FIXUP_FN = "gemm_streamk_fixup_kernel"
SK_PARAMS = ("DP_TILES", "SK_ITERS", "SK_SLOTS", "SK_GROUP")   # whole tiles; K iterations per lane; slots per
# tile; programs per lane (see split_plan)
MAX_SK_GROUP = 4             # lanes span a column's tile rows only when M has at most this many tiles
FIXUP_ROWS = 32              # tile rows a fixup program sums (a memory-bound pass wants many small programs)
FIXUP_WARPS = 4
WS_SLICE_BYTES = 32 * 1024   # at most this much of a partial tile per workspace store


def _sk_params() -> list[Param]:
    return [Param(name, "i32") for name in SK_PARAMS]


def fixup_rows(cfg: GemmConfig) -> int:
    return min(cfg.block_m, FIXUP_ROWS)


def entries(cfg: GemmConfig) -> list[EntrySpec]:
    ws = common.ptr("ws_ptr", cfg.acc_dtype, ALIGN_BYTES)
    main = [*tma.persistent_params(cfg), *tma.operand_descriptors(cfg),
            *gemm_tma.epilogue_descriptors(cfg, 3), ws, *_sk_params(), Param("SK_SEGS", "i32"),
            *common.operand_params(cfg), *common.epilogue_scalar_params(cfg), *common.tile_constexprs(cfg)]
    fixup = [common.ptr("out_ptr", cfg.out_dtype, cfg.align), *common.epilogue_pointer_params(cfg),
             *common.size_params(cfg, "MN"), Param("K", "i32"), Param("BATCH", "i32"), ws, *_sk_params(),
             *common.epilogue_scalar_params(cfg), *common.tile_constexprs(cfg),
             Param("FIXUP_ROWS", "constexpr", fixup_rows(cfg))]
    return [EntrySpec(MAIN_FN, tuple(main), cfg.num_warps, cfg.num_stages),
            EntrySpec(FIXUP_FN, tuple(fixup), FIXUP_WARPS, 1)]


def column_slices(name: str, width: str, count: int) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Lines splitting the [BLOCK_M, width] tensor `name` into `count` (a power of two) column slices, and the
    slices as (variable, column offset, width)."""
    if count == 1:
        return [], [(name, "0", width)]
    half = f"({width}) // 2"
    lo, hi = f"{name}_l", f"{name}_h"
    lines = [f"{lo}, {hi} = {name}.reshape(BLOCK_M, 2, {half}).permute(0, 2, 1).split()"]
    slices = []
    for part, base in ((lo, "0"), (hi, half)):
        more, parts = column_slices(part, half, count // 2)
        lines += more
        slices += [(var, col if base == "0" else (base if col == "0" else f"{base} + {col}"), w)
                   for var, col, w in parts]
    return lines, slices


# The workspace layout [sk_tile, slot, BLOCK_M, BLOCK_N] that the pointer stores write and the fixup reads:
# WS_ROWS (given the tile rows) then WS_POINTERS.
WS_ROWS = "ws_rows = (sk_tile * SK_SLOTS + slot).to(tl.int64) * BLOCK_M + {rows}"
WS_POINTERS = "ws_ptr + ws_rows[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]"


def _ws_store(cfg: GemmConfig, indent: str) -> str:
    if cfg.subtile == 0:      # from registers through pointers: no staging buffer, nothing waits on the store
        return (f"{indent}{WS_ROWS.format(rows='tl.arange(0, BLOCK_M)')}\n"
                f"{indent}tl.store({WS_POINTERS}, acc)\n")
    lines, slices = column_slices("acc", "BLOCK_N", ws_slices(cfg))
    lines.append("ws_row = (sk_tile * SK_SLOTS + slot) * BLOCK_M")
    lines += [f"ws_desc.store([ws_row, {col}], {var})" for var, col, _ in slices]
    return "".join(f"{indent}{line}\n" for line in lines)


def _ws_descriptor(cfg: GemmConfig) -> str:
    if cfg.subtile == 0:
        return ""
    return ("    ws_desc = tl.make_tensor_descriptor(\n        ws_ptr, shape=[(num_tiles - DP_TILES) * "
            "SK_SLOTS * BLOCK_M, BLOCK_N], strides=[BLOCK_N, 1],\n        block_shape=[BLOCK_M, BLOCK_N // "
            f"{ws_slices(cfg)}])\n")


def _main_source(cfg: GemmConfig, entry: EntrySpec) -> str:
    epilogue = gemm_tma.tile_epilogue(cfg, 3)
    return (
        f"@triton.jit\ndef {MAIN_FN}(\n    {common.signature_text(list(entry.params))},\n):\n"
        + tma.TILE_WALK
        + _ws_descriptor(cfg)
        + "    pid = tl.program_id(0)\n"
        + "    for tile_id in tl.range(pid, DP_TILES, NUM_PROGRAMS, flatten=True):\n"
        + tma.tile_coords() + tma.k_loop(cfg, "0", "k_tiles") + epilogue
        + "    lane = pid // SK_GROUP\n"
        + "    member = pid % SK_GROUP\n"
        + "    sk_total = (num_tiles - DP_TILES) // SK_GROUP * k_tiles\n"
        + "    start = lane * SK_ITERS\n"
        + "    end = min(start + SK_ITERS, sk_total)\n"
        + "    first_unit = start // k_tiles\n"
        # segment bounds come from the loop index alone (nothing loop-carried), so Triton pipelines the K
        # loop. (One loop over all of a lane's K iterations, storing at piece ends inside it, measured slower
        # on the H200: 256x6144x4096 bf16, 128x128x64 w4 s6, main kernel 30.8 -> 39.2 us.)
        + "    for seg in range(0, SK_SEGS):\n"
        + "        unit = first_unit + seg\n"
        + "        k_lo = max(start - unit * k_tiles, 0)\n"
        + "        k_hi = min(end - unit * k_tiles, k_tiles)\n"
        + "        sk_tile = unit * SK_GROUP + member\n"
        + "        tile_id = DP_TILES + sk_tile\n"
        + tma.tile_coords() + tma.k_loop(cfg, "k_lo", "k_hi")
        + "        if k_lo < k_hi:\n"
        + "            slot = lane - (unit * k_tiles) // SK_ITERS\n"
        + _ws_store(cfg, "            ")
    )


def _fixup_source(cfg: GemmConfig, entry: EntrySpec) -> str:
    acc_ty = common.TL_TYPES[cfg.acc_dtype]
    return (
        f"@triton.jit\ndef {FIXUP_FN}(\n    {common.signature_text(list(entry.params))},\n):\n"
        + tma.TILE_WALK
        + "    parts = BLOCK_M // FIXUP_ROWS\n"
        + "    sk_tile = tl.program_id(0) // parts\n"
        + "    part = tl.program_id(0) % parts\n"
        + "    tile_id = DP_TILES + sk_tile\n"
        + tma.tile_coords("    ")
        + "    rows = part * FIXUP_ROWS + tl.arange(0, FIXUP_ROWS)\n"
        + "    rm = off_m + rows\n"
        + "    unit = sk_tile // SK_GROUP\n"
        + "    first = (unit * k_tiles) // SK_ITERS\n"
        + "    last = ((unit + 1) * k_tiles - 1) // SK_ITERS\n"
        + f"    acc = tl.zeros((FIXUP_ROWS, BLOCK_N), dtype={acc_ty})\n"
        + "    for slot in range(0, last - first + 1):\n"
        + f"        {WS_ROWS.format(rows='rows')}\n"
        + f"        acc += tl.load({WS_POINTERS})\n"
        + common.epilogue(cfg)
    )


def render(cfg: GemmConfig) -> str:
    main, fixup = entries(cfg)
    return _main_source(cfg, main) + "\n\n" + _fixup_source(cfg, fixup)


def split_plan(tiles: int, k_tiles: int, programs: int, group: int = 1) -> tuple[int, int, int]:
    """(DP_TILES, SK_ITERS, SK_SLOTS): whole waves but the last one or two run data-parallel; the rest
    (between one and two waves of tiles, or all tiles when there is less than one wave) is stream-K.

    Stream-K runs in lanes of `group` programs (programs and the tile count are multiples of it): lane l
    takes K iterations [l * SK_ITERS, (l + 1) * SK_ITERS) of the units of `group` consecutive tiles, each of
    its programs one tile of the unit, at the same K offsets. With group = the tile rows of a column (M of at
    most MAX_SK_GROUP tiles), a lane's programs read the same B blocks at the same time, as data-parallel
    neighbours do (H200, 256x6144x4096 bf16, 128x128x64 w4 s6: main kernel 35.9 -> 30.8 us, lanes of 2)."""
    full_waves, rest = divmod(tiles, programs)
    if rest == 0:
        return tiles, 1, 1
    dp_tiles = (full_waves - 1) * programs if full_waves >= 2 else 0
    units, lanes = (tiles - dp_tiles) // group, programs // group
    sk_iters = -(-(units * k_tiles) // lanes)
    slots = -(-k_tiles // sk_iters) + 1
    return dp_tiles, sk_iters, slots


def sk_group(cfg: GemmConfig, m: int) -> int:
    """Programs per stream-K lane: the tile rows of a column when there are at most MAX_SK_GROUP of them
    (and the group-M swizzle orders a column's tiles consecutively), else 1."""
    rows = -(-m // cfg.block_m)
    return rows if rows <= min(MAX_SK_GROUP, cfg.group_m) else 1


def launch_plan(cfg: GemmConfig, m: int, n: int, k: int, batch: int, sms: int) -> LaunchPlan:
    tiles = common.tile_count(cfg, m, n, batch)
    k_tiles = -(-k // cfg.block_k)
    group = sk_group(cfg, m)
    programs = min(tiles * k_tiles, sms * tma.programs_per_sm(cfg, resources(cfg)))
    programs = max(group, programs // group * group)
    dp_tiles, sk_iters, slots = split_plan(tiles, k_tiles, programs, group)
    sk_tiles = tiles - dp_tiles
    segments = -(-sk_iters // k_tiles) + 1      # tile pieces one lane's K range can touch
    scalars = (("BATCH", batch), ("NUM_PROGRAMS", programs), ("DP_TILES", dp_tiles), ("SK_ITERS", sk_iters),
               ("SK_SLOTS", slots), ("SK_GROUP", group), ("SK_SEGS", segments))
    workspace = ("ws_ptr", max(1, sk_tiles * slots * cfg.block_m * cfg.block_n), cfg.acc_dtype)
    fixup_programs = sk_tiles * (cfg.block_m // fixup_rows(cfg))
    grids = ((programs, 1, 1),) + (((fixup_programs, 1, 1),) if sk_tiles else ())
    return LaunchPlan(grids, scalars, (workspace,))


def ws_slices(cfg: GemmConfig) -> int:
    """Column slices (a power of two, each >= 16 columns) of the fp32 partial tile that a program stores
    through the workspace descriptor."""
    slices = 1
    while cfg.block_m * cfg.block_n * 4 // slices > WS_SLICE_BYTES and cfg.block_n // (2 * slices) >= 16:
        slices *= 2
    return slices


# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: GemmConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    rules.unsplit_errors(cfg, errors)
    rules.subtile_errors(cfg, errors, subtiles=True)
    tma.tma_errors(cfg, arch, errors)


def problem_mismatch(cfg: GemmConfig, problem: GemmProblem) -> str | None:
    return rules.grid_mismatch(problem.batch)


def resources(cfg: GemmConfig) -> Resources:
    """The pipelined A and B tiles, the stage barriers and the output staging: a subtile, at least a column
    slice of the fp32 partial tile (stored through the same staging), or with subtile 0 the scratch of the
    layout conversion before the pointer stores (half the fp32 partial tile bounds it)."""
    tile, staging = cfg.block_m * cfg.block_n, 0
    if cfg.split_k == 1 and cfg.out_dtype in DTYPES:
        if cfg.subtile == 0:
            staging = tile * 4 // 2
        else:
            staging = max(tile // cfg.subtile * DTYPES[cfg.out_dtype].bytes, tile * 4 // ws_slices(cfg))
    return rules.tile_resources(cfg, cfg.num_warps, staging + tma.TMA_BARRIER_BYTES)
