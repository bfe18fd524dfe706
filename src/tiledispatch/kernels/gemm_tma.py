"""Families `tma_persistent` and `tma_ws`: one program per SM slot walking output tiles (group-M swizzle), A
and B loaded through tensor descriptors (TMA).

tma_persistent flattens the tile and K loops and stores through a descriptor in `subtile` column slices (0:
pointer stores); with split_k > 1 it walks (tile, K range) units, the last of a tile summing it. tma_ws
warp-specializes the loop on 2-D descriptors, one batch. Design, Triton 3.6's limits and measurements:
docs/design/gemm.md.
"""
from __future__ import annotations

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.fields import choice
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels import gemm_splitk, rules
from tiledispatch.kernels import tma_common as tma
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param, Resources
from tiledispatch.problems.gemm import GemmProblem

FN = "gemm_tma_kernel"
MAX_SPLIT_K = 64               # a split tma_persistent kernel sums its partials in one unrolled reduce
MAX_WS_STAGES = 4              # the deepest tma_ws pipeline measured correct (benchmarks/results/profiles)


def _rank(cfg: GemmConfig) -> int:
    return 2 if cfg.family == "tma_ws" else 3


def entries(cfg: GemmConfig) -> list[EntrySpec]:
    if cfg.split_k > 1:
        return _split_entries(cfg)
    params = [*tma.persistent_params(cfg), *_descriptor_params(cfg), *common.operand_params(cfg),
              *common.epilogue_scalar_params(cfg), *common.tile_constexprs(cfg)]
    return [EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages)]


def _descriptor_params(cfg: GemmConfig) -> list[Param]:
    """The kernel's tensor descriptors, built on the host (runtime/descriptors.py) except in tma_ws, whose
    descriptors are made on the device (_device_descriptors)."""
    if cfg.family == "tma_ws":
        return []
    return [*tma.operand_descriptors(cfg, 3), *epilogue_descriptors(cfg, 3)]


def _device_descriptors(cfg: GemmConfig) -> str:
    """tma_ws makes its descriptors on the device (2-D: one batch): on the H200 its warp-specialized loop hung
    loading through descriptor parameters, and Triton 3.6 fails to warp-specialize a store through one
    ('tt.descriptor_store' op tensor descriptor block and tensor types must match)."""
    if cfg.family != "tma_ws":
        return ""
    width = cfg.block_n // max(1, cfg.subtile)
    out = [tma.matrix_descriptor("out", cfg.out_dtype, cfg.block_m, width, 2)] if cfg.subtile else []
    return tma.device_descriptors([*tma.operand_descriptors(cfg, 2), *out])


def render(cfg: GemmConfig) -> str:
    if cfg.split_k > 1:
        return _split_source(cfg)
    (entry,) = entries(cfg)
    ws = cfg.family == "tma_ws"
    rank = _rank(cfg)
    loop = (f"    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten={not ws}, "
            f"warp_specialize={ws}):\n")
    return (f"@triton.jit\ndef {FN}(\n    {common.signature_text(list(entry.params))},\n):\n"
            + _device_descriptors(cfg) + tma.TILE_WALK + loop + tma.tile_coords()
            + tma.k_loop(cfg, "0", "k_tiles", rank=rank) + tile_epilogue(cfg, rank))


def tile_epilogue(cfg: GemmConfig, rank: int) -> str:
    """The epilogue of a persistent kernel's whole tiles, inside the tile loop: pointer stores from registers
    for subtile 0, else the descriptor epilogue in `subtile` column slices (epilogue_descriptors)."""
    if cfg.subtile == 0:
        return tma.indent_block(common.epilogue(cfg), "    ")
    return descriptor_epilogue(cfg, rank)


def epilogue_descriptors(cfg: GemmConfig, rank: int) -> list[Param]:
    """Descriptor parameters of the descriptor epilogue (subtile > 0): out, and C and D when read."""
    if cfg.subtile == 0:
        return []
    width = cfg.block_n // cfg.subtile
    names = ["out"] + (["c"] if cfg.with_c else []) + [f"d{i}" for i in range(cfg.num_d)]
    return [tma.matrix_descriptor(name, cfg.out_dtype, cfg.block_m, width, rank) for name in names]


def descriptor_epilogue(cfg: GemmConfig, rank: int) -> str:
    """Scale, then per column slice: + beta*C + bias + D, activation, cast, TMA store."""
    acc_ty = common.TL_TYPES[cfg.acc_dtype]
    lines = [f"acc = acc * {common.scale_expr(cfg)}"]
    parts = [("acc", "off_n")]
    if cfg.subtile == 2:
        lines.append("acc_lo, acc_hi = acc.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()")
        parts = [("acc_lo", "off_n"), ("acc_hi", "off_n + BLOCK_N // 2")]
    width = f"BLOCK_N // {cfg.subtile}"
    for acc, col in parts:
        lines += _slice_epilogue(cfg, acc, col, width, acc_ty, rank)
    return "".join(f"        {line}\n" for line in lines)


def _slice_epilogue(cfg: GemmConfig, acc: str, col: str, width: str, acc_ty: str, rank: int) -> list[str]:
    if rank == 3:
        box, shape = f"[tl.where(stride_{{n}}b == 0, 0, pid_b), off_m, {col}]", f".reshape(BLOCK_M, {width})"
        out_box, out_shape = f"[pid_b, off_m, {col}]", f".reshape(1, BLOCK_M, {width})"
    else:
        box, shape, out_box, out_shape = f"[off_m, {col}]", "", f"[off_m, {col}]", ""
    lines = []
    if cfg.with_c:
        lines.append(f"{acc} += beta * c_desc.load({box.format(n='c')}){shape}.to({acc_ty})")
    for i in range(cfg.num_d):
        lines.append(f"{acc} += d{i}_desc.load({box.format(n=f'd{i}')}){shape}.to({acc_ty})")
    return lines + _finish(cfg, acc, col, width, out_box, out_shape)


def _finish(cfg: GemmConfig, acc: str, col: str, width: str, out_box: str, out_shape: str) -> list[str]:
    """Bias, activation, cast and the TMA store of one column slice."""
    acc_ty = common.TL_TYPES[cfg.acc_dtype]
    lines = []
    if cfg.bias == "row":
        lines.append(f"{acc} += tl.load(bias_ptr + pid_b.to(tl.int64) * stride_biasb + rm.to(tl.int64), "
                     f"mask=rm < M, other=0).to({acc_ty})[:, None]")
    elif cfg.bias == "col":
        lines.append(f"cols = {col} + tl.arange(0, {width})")
        lines.append(f"{acc} += tl.load(bias_ptr + pid_b.to(tl.int64) * stride_biasb + cols.to(tl.int64), "
                     f"mask=cols < N, other=0).to({acc_ty})[None, :]")
    if cfg.activation != "none":
        lines.append(f"{acc} = " + common.ACTIVATION_EXPR[cfg.activation].format(x=acc))
    lines.append(f"out_desc.store({out_box}, {acc}.to({common.TL_TYPES[cfg.out_dtype]}){out_shape})")
    return lines


# -- split_k > 1 (tma_persistent): the persistent walk over (tile, split) units -----------------------------
# Unit u is split s = u // tiles of tile u % tiles (split-major: the programs running together read the same K
# range of neighbouring tiles, which L2 shares): it reduces K blocks [s * k_span, (s + 1) * k_span) through
# the descriptors, stores its fp32 partial into slot s of the tile's ws[tile, SPLIT_K, BLOCK_M, BLOCK_N] and
# counts itself in the tile's arrival counter. The unit that arrives last sums the tile's slots in split order
# (the same sum whichever unit that is: deterministic, no floating-point atomics), runs the epilogue through
# pointers and sets the counter back to zero, so the zero-initialised counters (LaunchPlan.counters) are zero
# again after every launch. No unit ever waits for another. The epilogue's stores assume nothing of the
# output's strides (conv im2col writes weight-gradient rows of any length through them). For few output tiles
# with a long K (M <= 256, say), where one unit per tile would leave most SMs idle; one launch, where a
# separate reduce kernel cost 3-4 us more on the H200
# (results/profiles/gemm_split_after_reduce_tile_h200.json).
def _split_entries(cfg: GemmConfig) -> list[EntrySpec]:
    params = [*tma.persistent_params(cfg), *tma.operand_descriptors(cfg, 3),
              common.ptr("ws_ptr", cfg.acc_dtype, ALIGN_BYTES),
              Param("count_ptr", "*i32"), *common.operand_params(cfg), *common.epilogue_scalar_params(cfg),
              *common.tile_constexprs(cfg), gemm_splitk.split_param(cfg)]
    return [EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages)]


SPLIT_STORE = """\
        tile_elems = BLOCK_M * BLOCK_N
        slots = ws_ptr + tile_id.to(tl.int64) * (SPLIT_K * tile_elems)
        in_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tl.store(slots + split * tile_elems + in_tile, acc)
"""


def _split_source(cfg: GemmConfig) -> str:
    (main,) = _split_entries(cfg)
    walk = ("    k_span = (k_tiles + SPLIT_K - 1) // SPLIT_K\n"
            "    for unit in tl.range(tl.program_id(0), num_tiles * SPLIT_K, NUM_PROGRAMS, flatten=True):\n"
            "        split = unit // num_tiles\n"
            "        tile_id = unit % num_tiles\n")
    return (f"@triton.jit\ndef {FN}(\n    {common.signature_text(list(main.params))},\n):\n"
            + tma.TILE_WALK + walk + tma.tile_coords()
            + tma.k_loop(cfg, "split * k_span", "tl.minimum(split * k_span + k_span, k_tiles)")
            + SPLIT_STORE
            + common.last_arrival("tile_id", "slots + in_tile", "slots + s * tile_elems + in_tile",
                                  "        ")
            + tma.indent_block(common.epilogue(cfg), "        "))


def launch_plan(cfg: GemmConfig, m: int, n: int, k: int, batch: int, sms: int) -> LaunchPlan:
    units = common.tile_count(cfg, m, n, batch) * cfg.split_k
    programs = min(units, sms * tma.programs_per_sm(cfg, resources(cfg)))
    scalars = (("BATCH", batch), ("NUM_PROGRAMS", programs))
    if cfg.split_k == 1:
        return LaunchPlan(((programs, 1, 1),), scalars=scalars)
    tiles = common.tile_count(cfg, m, n, batch)
    slots = tiles * cfg.split_k * cfg.block_m * cfg.block_n
    return LaunchPlan(((programs, 1, 1),), scalars=scalars, workspaces=(("ws_ptr", slots, cfg.acc_dtype),),
                      counters=(("count_ptr", tiles),))



# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: GemmConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    ws = cfg.family == "tma_ws"
    if ws:
        rules.unsplit_errors(cfg, errors, " (of tma_ws, only the fp8 form splits K)")
    if cfg.split_k != 1:
        choice(errors, "split_k", cfg.split_k, rules.SPLIT_K)
    if not ws and cfg.split_k > MAX_SPLIT_K:
        errors.append(("split_k", ("a split tma_persistent kernel sums its partials in one unrolled reduce: "
                                   f"split_k at most {MAX_SPLIT_K}, got {cfg.split_k}")))
    if not ws and cfg.split_k != 1 and cfg.subtile != 1:
        errors.append(("subtile", ("a split tma_persistent kernel runs its epilogue where it sums the "
                                   f"partials (pointer stores); subtile must be 1, got {cfg.subtile}")))
    rules.subtile_errors(cfg, errors, subtiles=not ws)
    tma.tma_errors(cfg, arch, errors)
    if ws:
        tma.ws_warps_errors(cfg, arch, errors)
        _ws_errors(cfg, errors)


def _ws_errors(cfg: GemmConfig, errors: rules.Errors) -> None:
    if cfg.with_c or cfg.num_d or cfg.bias == "row":
        field = "with_c" if cfg.with_c else ("num_d" if cfg.num_d else "bias")
        errors.append((field, ("tma_ws epilogues read nothing indexed by output rows (C, D, a row bias): "
                               "Triton 3.6's warp-specialized code computed wrong results for them on H200")))
    if cfg.num_stages > MAX_WS_STAGES:
        errors.append(("num_stages", ("Triton 3.6's warp-specialized pipeline computed wrong results on H200 "
                                      "with 6 and 8 stages (128x64 and 128x128 tiles, every shape tried); "
                                      f"tma_ws needs num_stages <= {MAX_WS_STAGES}, got {cfg.num_stages}")))
    if cfg.block_m < 128 and cfg.block_n > 128:
        errors.append(("block_n", (f"Triton 3.6 cannot split a {cfg.block_m}x{cfg.block_n} tile between the "
                                   "two consumer warp groups of tma_ws (compile fails); use block_n <= 128 "
                                   "or block_m >= 128")))


def problem_mismatch(cfg: GemmConfig, problem: GemmProblem) -> str | None:
    if cfg.family == "tma_ws" and (reason := tma.ws_batch_mismatch(cfg, problem)):
        return reason
    return rules.grid_mismatch(problem.batch)


def resources(cfg: GemmConfig) -> Resources:
    """The pipelined A and B tiles, the stage barriers and the output staging: tma_ws a block_n // subtile
    slice; tma_persistent (unsplit) a subtile, or with subtile 0 the scratch of the accumulator's layout
    conversion before the pointer stores (sm_90: 8 KiB for 128x128 over 4 warps, 32 KiB for 128x256 over 8;
    half the stored tile bounds it). tma_ws holds its accumulator in two consumer warp groups."""
    tile = cfg.block_m * cfg.block_n
    out = DTYPES[cfg.out_dtype].bytes if cfg.out_dtype in DTYPES else 0   # unknown: reported, stages nothing
    if cfg.family == "tma_ws":
        staging = tile // cfg.subtile * out if cfg.subtile else 0
        return rules.tile_resources(cfg, 2 * cfg.num_warps, staging + tma.TMA_BARRIER_BYTES)
    staging = 0
    if cfg.split_k == 1:
        staging = tile * out // 2 if cfg.subtile == 0 else tile // cfg.subtile * out
    return rules.tile_resources(cfg, cfg.num_warps, staging + tma.TMA_BARRIER_BYTES)
