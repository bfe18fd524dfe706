"""Family `tma_ws` for fp8 (e4m3, rcr): a warp-specialized persistent GEMM written in Gluon, where the kernel
owns its wgmma waits.

Each K block's product is promoted into the fp32 accumulator one block late, overlapping the next block's
wgmma; a producer warp feeds a ring of STAGES slots and one consumer warp group per 64 rows accumulates and
stores its rows; split_k > 1 sums per-tile workspace slots in split order. Gluon does not run on the
interpreter: CUDA devices only. Design and measurements: docs/design/gemm_ws_fp8.md.
"""
from __future__ import annotations

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.fields import choice
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.errors import legal
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels import rules
from tiledispatch.kernels import tma_common as tma
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.problems.gemm import GemmProblem

FN = "gemm_tma_kernel"
DIALECT = "gluon"
CHUNK = 2            # K blocks per unrolled chunk of the two-consumer form (docs/design/gemm_ws_fp8.md)
WG_ROWS = 64         # rows of the tile per consumer warp group
# 128-row tiles promote one block late in chunks of two, 192-row tiles (less register room per group) each
# block once its group completes: both fit the partitions' registers for these tiles.
BLOCK_M = (128, 192)
BLOCK_N = (64, 128)
BLOCK_K = 128
SMEM_EXTRA = 256     # bytes Triton 3.6 adds for the partitions (152-168 measured on sm_90 builds)
MAX_SPLIT_K = 8      # split K: the last of a tile's splits sums the slots in an unrolled loop
# Worker partitions (consumer warp groups after the default one, then the producer warp) and the registers
# each asks for, by consumer count: a 4-warp consumer holds three 64 x block_n fp32 sets with two consumers
# (the lagged promotion), two with three, and all partitions together fit the SM's 64K registers.
WORKER_BUDGET = {2: ([4, 1], [240, 24]), 3: ([4, 4, 1], [160, 160, 24])}


def _layout(rows: int, cols: int, dtype: str) -> str:
    """The shared layout (NVMMA swizzle) of one descriptor box, as a signature type names it."""
    from triton.experimental.gluon import language as gl

    element = getattr(gl, common.TL_TYPES[dtype].removeprefix("tl."))   # Gluon names the types as tl does
    return repr(gl.NVMMASharedLayout.get_default_for([rows, cols], element))


def _descriptor(name: str, dtype: str, rows: int, cols: int, geometry: str) -> Param:
    """A host-built descriptor parameter (runtime/descriptors.py reads `geometry`: base, rows, cols, row
    stride) whose type carries the box's shared layout, as Gluon's signatures do."""
    ty = f"tensordesc<{DTYPES[dtype].triton}[{rows}, {cols}],{_layout(rows, cols, dtype)}>"
    return Param(f"{name}_desc", ty, geometry)


def consumers(cfg: GemmConfig) -> int:
    """Consumer warp groups: one per WG_ROWS rows of the tile (at least one, so that estimates of invalid
    tiles stay defined)."""
    return max(1, cfg.block_m // WG_ROWS)


def chunk(cfg: GemmConfig) -> int:
    """K blocks per chunk: the three-consumer form holds two register sets (accumulator and partial), so it
    promotes each block as soon as its wgmma group completes; its other two warp groups keep the tensor cores
    busy meanwhile."""
    return CHUNK if consumers(cfg) == 2 else 1


def a_box_rows(cfg: GemmConfig) -> int:
    """Rows of A's descriptor box: the tile's, or for a 192-row tile (not a power of two, which Gluon's shapes
    must be) 64, three boxes a stage."""
    return cfg.block_m if cfg.block_m & (cfg.block_m - 1) == 0 else WG_ROWS


def entries(cfg: GemmConfig) -> list[EntrySpec]:
    params = [_descriptor("a", cfg.dtype, a_box_rows(cfg), cfg.block_k, "a_ptr,M,K,stride_ar"),
              _descriptor("b", cfg.dtype, cfg.block_n, cfg.block_k, "b_ptr,N,K,stride_bc"),
              _descriptor("out", cfg.out_dtype, WG_ROWS, cfg.block_n, "out_ptr,M,N,stride_or"),
              Param("scale_a_ptr", "*fp32"), Param("scale_b_ptr", "*fp32")]
    if cfg.bias != "none":
        params.append(common.ptr("bias_ptr", cfg.out_dtype))
    if cfg.split_k > 1:
        params += [common.ptr("ws_ptr", cfg.acc_dtype, ALIGN_BYTES), Param("count_ptr", "*i32")]
    params += [Param("M", "i32"), Param("N", "i32"), Param("K", "i32"), Param("alpha", "fp32"),
               Param("GROUP_M", "constexpr", cfg.group_m), Param("STAGES", "constexpr", cfg.num_stages),
               Param("CHUNK", "constexpr", chunk(cfg)), Param("SPLIT_K", "constexpr", cfg.split_k)]
    return [EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages, DIALECT)]


def _epilogue_lines(cfg: GemmConfig) -> str:
    """Bias and activation on a warp group's rows (`acc`: rows off_m.., columns off_n.., wgmma layout)."""
    lines = []
    if cfg.bias == "row":
        lines += ["rows = off_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))",
                  ("acc = acc + gl.expand_dims(gl.load(bias_ptr + rows, mask=rows < M, other=0.0)"
                  ".to(gl.float32), 1)")]
    elif cfg.bias == "col":
        lines += ["cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))",
                  ("acc = acc + gl.expand_dims(gl.load(bias_ptr + cols, mask=cols < N, other=0.0)"
                  ".to(gl.float32), 0)")]
    if cfg.activation != "none":
        expr = common.ACTIVATION_EXPR[cfg.activation].format(x="acc")
        # Gluon's element-wise builtins; the NaN-propagation enum is triton.language's (gl has none)
        lines.append("acc = " + expr.replace("tl.", "gl.").replace("gl.PropagateNan", "tl.PropagateNan"))
    return "".join(f"    {line}\n" for line in lines)


def render(cfg: GemmConfig) -> str:
    (entry,) = entries(cfg)
    runtime = [p.name for p in entry.params if not p.is_constexpr]
    bias = ", bias_ptr" if cfg.bias != "none" else ""
    split = ", ws_ptr, count_ptr" if cfg.split_k > 1 else ""
    constexprs = [f"{p.name}: gl.constexpr" for p in entry.params if p.is_constexpr]
    signature = ",\n    ".join([*runtime, *constexprs])
    groups = consumers(cfg)
    staging = "".join(f"    out_smem{g} = gl.allocate_shared_memory(out_desc.dtype, "
                      "out_desc.block_type.shape, out_desc.layout)\n" for g in range(groups))
    partitions = "".join(f"        (_consume, (out_desc, out_smem{g}, scale{bias}{split}, M, N, full, empty, "
                         "a_bufs, b_bufs, my_units,\n                    k_span, num_pid_m, num_pid_n, "
                         f"layout, GROUP_M, STAGES, CHUNK, SPLIT_K, BM, {g})),\n" for g in range(groups))
    warps, regs = WORKER_BUDGET[groups]
    fills = {"{PARTITIONS}": partitions, "{STAGING}": staging, "{CONSUMERS}": str(groups),
             "{BLOCK_M}": str(cfg.block_m), "{WORKER_WARPS}": str(warps), "{WORKER_REGS}": str(regs),
             "{BIAS}": bias, "{SPLIT}": split, "{EPILOGUE}\n": _epilogue_lines(cfg), "{SIGNATURE}": signature}
    source = SOURCE
    for field, text in fills.items():
        source = source.replace(field, text)
    return source


def launch_plan(cfg: GemmConfig, m: int, n: int, k: int, batch: int, sms: int) -> LaunchPlan:
    """One program per SM (the ring and staging buffers take most of an SM's shared memory), at most one per
    unit (output tile, or with split_k > 1 a tile's K range); split K adds the fp32 partial slots of every
    tile and one arrival counter per tile and consumer warp group."""
    tiles = common.tile_count(cfg, m, n, batch)
    grids = ((min(tiles * cfg.split_k, sms), 1, 1),)
    if cfg.split_k == 1:
        return LaunchPlan(grids)
    slots = tiles * cfg.split_k * cfg.block_m * cfg.block_n
    return LaunchPlan(grids, workspaces=(("ws_ptr", slots, cfg.acc_dtype),),
                      counters=(("count_ptr", tiles * consumers(cfg)),))



# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: GemmConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    if cfg.split_k != 1:
        choice(errors, "split_k", cfg.split_k, rules.SPLIT_K)
    rules.subtile_errors(cfg, errors, subtiles=False)
    tma.tma_errors(cfg, arch, errors)
    tma.ws_warps_errors(cfg, arch, errors)
    form = "fp8 tma_ws (the Gluon kernel of 64-row consumer warp groups)"
    if cfg.block_m not in BLOCK_M:
        errors.append(("block_m", f"{form} needs block_m in {legal(BLOCK_M)}, got {cfg.block_m}"))
    if cfg.block_m in rules.WS_FP8_WIDE_M and cfg.block_n != 128:
        errors.append(("block_n", (f"{form} runs 192-row tiles with block_n=128 only (three warp groups of "
                                   f"64 rows share the registers), got {cfg.block_n}")))
    if cfg.block_n not in BLOCK_N:
        errors.append(("block_n", (f"{form} needs block_n in {legal(BLOCK_N)} (wider tiles run out of "
                                   f"registers for the lagged promotion), got {cfg.block_n}")))
    if cfg.block_k != BLOCK_K:
        errors.append(("block_k", f"{form} needs block_k={BLOCK_K}, got {cfg.block_k}"))
    if cfg.with_c or cfg.num_d:
        errors.append(("with_c" if cfg.with_c else "num_d", (f"{form} reads no C or D tensors; "
                                                             "tma_persistent and tiled fp8 kernels do")))
    if cfg.split_k > MAX_SPLIT_K:
        errors.append(("split_k", (f"{form} sums a tile's split partials in one unrolled reduce: split_k at "
                                   f"most {MAX_SPLIT_K}, got {cfg.split_k}")))


def problem_mismatch(cfg: GemmConfig, problem: GemmProblem) -> str | None:
    return tma.ws_batch_mismatch(cfg, problem) or rules.grid_mismatch(problem.batch)


def resources(cfg: GemmConfig) -> Resources:
    """The ring of A and B slots with their two barriers, a WG_ROWS-row output staging buffer per consumer
    warp group and SMEM_EXTRA bytes for the partitions; each consumer warp group holds its rows' sums."""
    warps = cfg.num_warps * consumers(cfg)
    if cfg.out_dtype not in DTYPES:   # reported by validity; the ring and barriers alone
        return rules.tile_resources(cfg, warps, tma.TMA_BARRIER_BYTES)
    ring = 16 * max(1, cfg.num_stages)   # the barriers of each slot
    staging = consumers(cfg) * WG_ROWS * cfg.block_n * DTYPES[cfg.out_dtype].bytes
    return rules.tile_resources(cfg, warps, ring + staging + SMEM_EXTRA)


SOURCE = '''\
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier   # Triton 3.7 renamed thread_barrier


@gluon.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """Grouped (super-row) order of output tiles, as the other GEMM families use."""
    group = tile // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    size_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % (GROUP_M * num_pid_n)) % size_m
    pid_n = (tile % (GROUP_M * num_pid_n)) // size_m
    return pid_m, pid_n


@gluon.jit
def _issue_load(p, k_span, num_pid_m, num_pid_n, a_desc, b_desc, full, a_bufs, b_bufs, GROUP_M: gl.constexpr,
                STAGES: gl.constexpr, SPLIT_K: gl.constexpr, BM: gl.constexpr):
    """TMA loads of the program's p-th K block (block p % k_span of its unit p // k_span) into slot p % STAGES,
    completing on that slot's `full` barrier. Units are split-major: unit u is split u // tiles of tile
    u % tiles, whose K range starts k_span blocks per split further (blocks past K load as zeros)."""
    A_ROWS: gl.constexpr = a_desc.block_type.shape[0]
    A_BOXES: gl.constexpr = BM // A_ROWS
    BN: gl.constexpr = b_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    tile = gl.program_id(0) + (p // k_span) * gl.num_programs(0)
    k = (p % k_span) * BK
    if SPLIT_K > 1:
        k += tile // (num_pid_m * num_pid_n) * k_span * BK
        tile = tile % (num_pid_m * num_pid_n)
    pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
    bar = full.index(p % STAGES)
    mbarrier.expect(bar, A_BOXES * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    for i in gl.static_range(A_BOXES):
        tma.async_copy_global_to_shared(a_desc, [pid_m * BM + i * A_ROWS, k], bar,
                                        a_bufs.index((p % STAGES) * A_BOXES + i))
    tma.async_copy_global_to_shared(b_desc, [pid_n * BN, k], bar, b_bufs.index(p % STAGES))


@gluon.jit
def _producer(a_desc, b_desc, full, empty, a_bufs, b_bufs, total, k_span, num_pid_m, num_pid_n,
              GROUP_M: gl.constexpr, STAGES: gl.constexpr, SPLIT_K: gl.constexpr, BM: gl.constexpr):
    for p in range(total):
        # every consumer warp group released the slot's previous block (phase (p // STAGES - 1) & 1); the first
        # round waits on the phase before the barrier's first, which passes at once
        mbarrier.wait(empty.index(p % STAGES), ((p // STAGES) & 1) ^ 1)
        _issue_load(p, k_span, num_pid_m, num_pid_n, a_desc, b_desc, full, a_bufs, b_bufs, GROUP_M, STAGES,
                    SPLIT_K, BM)


@gluon.jit
def _issue_mma(c, full, a_bufs, b_bufs, spare, STAGES: gl.constexpr, A_BOXES: gl.constexpr, WG: gl.constexpr):
    """Wait for the c-th K block's operands and start its wgmma group on this warp group's 64 rows, into a fresh
    partial (spare's registers)."""
    slot = c % STAGES
    mbarrier.wait(full.index(slot), (c // STAGES) & 1)
    A_ROWS: gl.constexpr = a_bufs.shape[1]
    a = a_bufs.index(slot * A_BOXES + WG * 64 // A_ROWS).slice(WG * 64 % A_ROWS, 64, dim=0)
    return warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), spare, use_acc=False, is_async=True)


@gluon.jit
def _promote(j, acc, prev, num_outstanding: gl.constexpr, empty, STAGES: gl.constexpr):
    """Wait until block j's partial (prev) is complete, add it to the accumulator and release its slot to the
    producer. Returns the accumulator and the partial's registers, free for a later block."""
    done = warpgroup_mma_wait(num_outstanding=num_outstanding, deps=(prev, ))
    mbarrier.arrive(empty.index(j % STAGES), count=1)
    return acc + done, done


@gluon.jit
def _store_tile(acc, scale{BIAS}, M, N, tile, num_pid_m, num_pid_n, out_desc, out_smem, layout: gl.constexpr,
                GROUP_M: gl.constexpr, BM: gl.constexpr, WG: gl.constexpr):
    """The epilogue of this warp group's rows of output tile `tile`, stored through a TMA store."""
    ROWS: gl.constexpr = out_desc.block_type.shape[0]
    BN: gl.constexpr = out_desc.block_type.shape[1]
    pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
    off_m = pid_m * BM + WG * ROWS
    off_n = pid_n * BN
    acc = acc * scale
{EPILOGUE}
    tma.store_wait(pendings=0)   # the previous tile's store has read the staging buffer
    out_smem.store(acc.to(out_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(out_desc, [off_m, off_n], out_smem)


@gluon.jit
def _sum_splits(acc, tile, split, ws_ptr, count_ptr, layout: gl.constexpr, SPLIT_K: gl.constexpr, BM: gl.constexpr,
                WG: gl.constexpr):
    """Store this warp group's partial of `tile` into slot `split` of the tile's fp32 workspace and count it on
    the (tile, warp group) counter. The group that arrives last of SPLIT_K sets the counter back to zero for the
    next launch and sums the slots in split order (the same sum whichever arrives last: deterministic, no
    floating-point atomics). The barrier makes every thread's stores precede the release (the atomic is one
    thread's); the loads read other programs' stores, so they bypass L1. Returns the sum and whether this
    group holds it."""
    ROWS: gl.constexpr = acc.shape[0]
    BN: gl.constexpr = acc.shape[1]
    rows = WG * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    in_tile = gl.expand_dims(rows, 1) * BN + gl.expand_dims(cols, 0)
    slots = ws_ptr + tile.to(gl.int64) * (SPLIT_K * BM * BN)
    gl.store(slots + split * (BM * BN) + in_tile, acc)
    _cta_barrier()
    counter = count_ptr + tile * (BM // ROWS) + WG
    last = gl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == SPLIT_K - 1
    if last:
        gl.store(counter, 0)
        acc = gl.load(slots + in_tile, cache_modifier=".cg")
        for s in gl.static_range(1, SPLIT_K):
            acc += gl.load(slots + s * (BM * BN) + in_tile, cache_modifier=".cg")
    return acc, last


@gluon.jit
def _consume(out_desc, out_smem, scale{BIAS}{SPLIT}, M, N, full, empty, a_bufs, b_bufs, my_units, k_span,
             num_pid_m, num_pid_n, layout: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
             CHUNK: gl.constexpr, SPLIT_K: gl.constexpr, BM: gl.constexpr, WG: gl.constexpr):
    """Accumulate and store warp group WG's 64 rows of each of the program's units (k_span K blocks each):
    chunks of CHUNK K blocks, unrolled, each block's wgmma group issued before the previous block's partial is
    promoted (CHUNK 1: each block's partial promoted once its own group completes). With SPLIT_K > 1 the last
    of a tile's splits to finish sums them and stores the tile."""
    gl.static_assert(CHUNK == 1 or CHUNK % 2 == 0, "a chunk hands its two partials' registers to the next")
    ROWS: gl.constexpr = out_desc.block_type.shape[0]
    BN: gl.constexpr = out_desc.block_type.shape[1]
    A_BOXES: gl.constexpr = BM // a_bufs.shape[1]   # A's descriptor boxes per stage
    free_a = gl.zeros((ROWS, BN), dtype=gl.float32, layout=layout)
    free_b = gl.zeros((ROWS, BN), dtype=gl.float32, layout=layout)
    c = 0   # the program's next K block (over all its tiles)
    for t in range(my_units):
        acc = gl.zeros((ROWS, BN), dtype=gl.float32, layout=layout)
        tail = k_span   # CHUNK 1: every block promoted as soon as its group completes (two register sets)
        if CHUNK > 1:
            tail = k_span % CHUNK
            for ch in range(k_span // CHUNK):
                prev = _issue_mma(c, full, a_bufs, b_bufs, free_a, STAGES, A_BOXES, WG)
                spare = free_b
                for i in gl.static_range(1, CHUNK):
                    cur = _issue_mma(c + i, full, a_bufs, b_bufs, spare, STAGES, A_BOXES, WG)
                    acc, spare = _promote(c + i - 1, acc, prev, 1, empty, STAGES)
                    if i == CHUNK - 1:
                        free_a = spare
                    prev = cur
                acc, free_b = _promote(c + CHUNK - 1, acc, prev, 0, empty, STAGES)
                c += CHUNK
        for r in range(tail):   # the tile's last blocks (CHUNK 1: all), promoted without overlap
            prev = _issue_mma(c, full, a_bufs, b_bufs, free_a, STAGES, A_BOXES, WG)
            acc, free_a = _promote(c, acc, prev, 0, empty, STAGES)
            c += 1
        tile = gl.program_id(0) + t * gl.num_programs(0)
        if SPLIT_K > 1:
            tiles = num_pid_m * num_pid_n
            acc, last = _sum_splits(acc, tile % tiles, tile // tiles, ws_ptr, count_ptr, layout, SPLIT_K, BM, WG)
            if last:
                _store_tile(acc, scale{BIAS}, M, N, tile % tiles, num_pid_m, num_pid_n, out_desc, out_smem, layout,
                            GROUP_M, BM, WG)
        else:
            _store_tile(acc, scale{BIAS}, M, N, tile, num_pid_m, num_pid_n, out_desc, out_smem, layout, GROUP_M, BM,
                        WG)
    tma.store_wait(pendings=0)


@gluon.jit
def gemm_tma_kernel(
    {SIGNATURE},
):
    BM: gl.constexpr = {BLOCK_M}
    BN: gl.constexpr = out_desc.block_type.shape[1]
    gl.static_assert(BM == {CONSUMERS} * out_desc.block_type.shape[0], "one consumer warp group per 64 rows")
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_span = gl.cdiv(K, a_desc.block_type.shape[1])   # K blocks per unit: all of a tile's, or a split's
    if SPLIT_K > 1:
        k_span = gl.cdiv(k_span, SPLIT_K)
    my_units = gl.cdiv(num_pid_m * num_pid_n * SPLIT_K - gl.program_id(0), gl.num_programs(0))

    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES * (BM // a_desc.block_type.shape[0])]
                                       + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count={CONSUMERS})   # one arrival per consumer warp group
{STAGING}    scale = alpha * gl.load(scale_a_ptr) * gl.load(scale_b_ptr)
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, BN, 32])   # a consumer warp group's
    gl.warp_specialize([
{PARTITIONS}        (_producer, (a_desc, b_desc, full, empty, a_bufs, b_bufs, my_units * k_span, k_span, num_pid_m,
                     num_pid_n, GROUP_M, STAGES, SPLIT_K, BM)),
    ], {WORKER_WARPS}, {WORKER_REGS})
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(full.index(i))
        mbarrier.invalidate(empty.index(i))
'''  # noqa: E501, RUF100 (the kernel's own lines reach the generated source as they are)
