"""Family `streamk`: data-parallel persistent waves, then stream-K over the remaining tiles.

The first DP_TILES tiles are computed whole by a persistent walk (as tma_persistent, pointer epilogue). The
K iterations of the remaining tiles are cut into NUM_PROGRAMS equal contiguous ranges, so the last waves keep
every SM busy; each program writes the fp32 partial sums of the tile pieces it covers to a workspace slot.
A second kernel adds the slots of each stream-K tile in a fixed order and runs the epilogue: deterministic,
no atomics, no inter-program waiting.
"""
from __future__ import annotations

from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels import tma_common as tma
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param

MAIN_FN = "gemm_streamk_kernel"
FIXUP_FN = "gemm_streamk_fixup_kernel"
MAX_FIXUP_ACC = 64    # fp32 sums per thread in the fixup kernel (it holds one whole tile)
SK_PARAMS = ("DP_TILES", "SK_ITERS", "SK_SLOTS")   # whole tiles; K iterations per program; slots per tile


def _sk_params() -> list[Param]:
    return [Param(name, "i32") for name in SK_PARAMS]


def entries(cfg: GemmConfig) -> list[EntrySpec]:
    ws = common.ptr("ws_ptr", cfg.acc_dtype, ALIGN_BYTES)
    main = [*tma.persistent_params(cfg), ws, *_sk_params(), Param("SK_SEGS", "i32"), *common.operand_params(cfg),
            *common.epilogue_scalar_params(cfg), *common.tile_constexprs(cfg)]
    fixup = [common.ptr("out_ptr", cfg.out_dtype, cfg.align), *common.epilogue_pointer_params(cfg),
             *common.size_params(cfg, "MN"), Param("K", "i32"), Param("BATCH", "i32"), ws, *_sk_params(),
             *common.epilogue_scalar_params(cfg), *common.tile_constexprs(cfg)]
    return [EntrySpec(MAIN_FN, tuple(main), cfg.num_warps, cfg.num_stages),
            EntrySpec(FIXUP_FN, tuple(fixup), fixup_warps(cfg), 1)]


def fixup_warps(cfg: GemmConfig) -> int:
    return min(16, max(4, cfg.block_m * cfg.block_n // (32 * MAX_FIXUP_ACC)))


WS_TILE = """\
{i}ws_tile = (ws_ptr + ((sk_tile * SK_SLOTS + slot).to(tl.int64) * BLOCK_M * BLOCK_N)
{i}           + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :])
"""


def _main_source(cfg: GemmConfig, entry: EntrySpec) -> str:
    epilogue = tma.indent_block(common.epilogue(cfg), "    ")
    return (
        f"@triton.jit\ndef {MAIN_FN}(\n    {common.signature_text(list(entry.params))},\n):\n"
        + tma.operand_descriptors(cfg) + tma.TILE_WALK
        + "    pid = tl.program_id(0)\n"
        + "    for tile_id in tl.range(pid, DP_TILES, NUM_PROGRAMS):\n"
        + tma.tile_coords() + tma.k_loop(cfg, "0", "k_tiles") + epilogue
        + "    sk_total = (num_tiles - DP_TILES) * k_tiles\n"
        + "    start = pid * SK_ITERS\n"
        + "    end = min(start + SK_ITERS, sk_total)\n"
        + "    first_tile = start // k_tiles\n"
        # segment bounds come from the loop index alone (nothing loop-carried), so Triton pipelines the K loop
        + "    for seg in range(0, SK_SEGS):\n"
        + "        sk_tile = first_tile + seg\n"
        + "        k_lo = max(start - sk_tile * k_tiles, 0)\n"
        + "        k_hi = min(end - sk_tile * k_tiles, k_tiles)\n"
        + "        tile_id = DP_TILES + sk_tile\n"
        + tma.tile_coords() + tma.k_loop(cfg, "k_lo", "k_hi")
        + "        if k_lo < k_hi:\n"
        + "            slot = pid - (sk_tile * k_tiles) // SK_ITERS\n"
        + WS_TILE.format(i="            ")
        + "            tl.store(ws_tile, acc)\n"
    )


def _fixup_source(cfg: GemmConfig, entry: EntrySpec) -> str:
    acc_ty = common.TL_TYPES[cfg.acc_dtype]
    return (
        f"@triton.jit\ndef {FIXUP_FN}(\n    {common.signature_text(list(entry.params))},\n):\n"
        + tma.TILE_WALK
        + "    sk_tile = tl.program_id(0)\n"
        + "    tile_id = DP_TILES + sk_tile\n"
        + tma.tile_coords("    ")
        + "    first = (sk_tile * k_tiles) // SK_ITERS\n"
        + "    last = ((sk_tile + 1) * k_tiles - 1) // SK_ITERS\n"
        + f"    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={acc_ty})\n"
        + "    for slot in range(0, last - first + 1):\n"
        + WS_TILE.format(i="        ")
        + "        acc += tl.load(ws_tile)\n"
        + common.epilogue(cfg)
    )


def render(cfg: GemmConfig) -> str:
    main, fixup = entries(cfg)
    return _main_source(cfg, main) + "\n\n" + _fixup_source(cfg, fixup)


def split_plan(tiles: int, k_tiles: int, programs: int) -> tuple[int, int, int]:
    """(DP_TILES, SK_ITERS, SK_SLOTS): whole waves but the last one or two run data-parallel; the rest
    (between one and two waves of tiles, or all tiles when there is less than one wave) is stream-K."""
    full_waves, rest = divmod(tiles, programs)
    if rest == 0:
        return tiles, 1, 1
    dp_tiles = (full_waves - 1) * programs if full_waves >= 2 else 0
    sk_iters = -(-((tiles - dp_tiles) * k_tiles) // programs)
    slots = -(-k_tiles // sk_iters) + 1
    return dp_tiles, sk_iters, slots


def launch_plan(cfg: GemmConfig, m: int, n: int, k: int, batch: int, sms: int) -> LaunchPlan:
    tiles = common.tile_count(cfg, m, n, batch)
    k_tiles = -(-k // cfg.block_k)
    programs = min(tiles * k_tiles, sms * tma.programs_per_sm(cfg))
    dp_tiles, sk_iters, slots = split_plan(tiles, k_tiles, programs)
    sk_tiles = tiles - dp_tiles
    segments = -(-sk_iters // k_tiles) + 1      # tile pieces one program's K range can touch
    scalars = (("BATCH", batch), ("NUM_PROGRAMS", programs), ("DP_TILES", dp_tiles), ("SK_ITERS", sk_iters),
               ("SK_SLOTS", slots), ("SK_SEGS", segments))
    workspace = ("ws_ptr", max(1, sk_tiles * slots * cfg.block_m * cfg.block_n), cfg.acc_dtype)
    grids = ((programs, 1, 1),) + (((sk_tiles, 1, 1),) if sk_tiles else ())
    return LaunchPlan(grids, scalars, (workspace,))
