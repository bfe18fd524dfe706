"""Families `tma_persistent` and `tma_ws`: one program per SM slot walking output tiles (group-M swizzle),
A and B loaded through tensor descriptors (TMA).

tma_persistent flattens the tile and K loops (the next tile's loads overlap this tile's epilogue) and writes
the output through a descriptor in `subtile` column slices (a smaller staging buffer leaves shared memory for
deeper pipelines); C and D are read through descriptors too.
tma_ws warp-specializes the tile loop (a producer warp group issuing TMA loads, two consumer groups running
wgmma). Triton 3.6 fails to compile warp-specialized rank-3 descriptor stores and hangs on the GPU on
warp-specialized rank-3 loads, so tma_ws uses 2-D descriptors throughout (no epilogue subtiling) and computes
one batch (is_supported refuses batched problems); its epilogues read no C or D (the validity predicate says
why).
"""
from __future__ import annotations

from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels import tma_common as tma
from tiledispatch.kernels.spec import EntrySpec, LaunchPlan

FN = "gemm_tma_kernel"


def entries(cfg: GemmConfig) -> list[EntrySpec]:
    params = [*tma.persistent_params(cfg), *common.operand_params(cfg), *common.epilogue_scalar_params(cfg),
              *common.tile_constexprs(cfg)]
    return [EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages)]


def render(cfg: GemmConfig) -> str:
    (entry,) = entries(cfg)
    ws = cfg.family == "tma_ws"
    rank = 2 if ws else 3
    loop = (f"    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten={not ws}, "
            f"warp_specialize={ws}):\n")
    return (f"@triton.jit\ndef {FN}(\n    {common.signature_text(list(entry.params))},\n):\n"
            + tma.operand_descriptors(cfg, rank) + epilogue_descriptors(cfg, rank)
            + tma.TILE_WALK + loop + tma.tile_coords() + tma.k_loop(cfg, "0", "k_tiles", rank=rank)
            + descriptor_epilogue(cfg, rank))


def epilogue_descriptors(cfg: GemmConfig, rank: int) -> str:
    width = f"BLOCK_N // {cfg.subtile}"
    names = ["out"] + (["c"] if cfg.with_c else []) + [f"d{i}" for i in range(cfg.num_d)]
    text = "".join(tma.matrix_descriptor(name, width, rank) for name in names)
    return text.replace("stride_outb", "stride_ob").replace("stride_outr", "stride_or")


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


def launch_plan(cfg: GemmConfig, m: int, n: int, k: int, batch: int, sms: int) -> LaunchPlan:
    programs = min(tma.tile_count(cfg, m, n, batch), sms * tma.programs_per_sm(cfg))
    return LaunchPlan(((programs, 1, 1),), scalars=(("BATCH", batch), ("NUM_PROGRAMS", programs)))

