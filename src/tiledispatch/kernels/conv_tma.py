"""Family `tma`, directions fwd and bwd_data at stride 1: implicit GEMM whose operand tiles are tensor-copy
(TMA) boxes, so the loads need no per-pixel index math, no masks and no im2col.

Programs are persistent (at most as many as fit on the SMs at once, walking tiles with that stride), so the
two descriptors are made once per program. A tile is BLOCK_M output pixels that form a box of one image
(1-D: BLOCK_M along w; 2-D: TH x 8; 3-D: TD x 8 x 8, see `pixel_box`) times BLOCK_N result channels of one group. For each tap the activation
operand is the same pixel box shifted by the tap, read through a descriptor over the whole channels-last tensor
[N, *spatial, channels]: the box may start at negative coordinates or run past the end, and the tensor-copy
engine fills those elements with zeros, which is exactly the convolution's zero padding. The weight operand is a
[BLOCK_N, 1.., BLOCK_K] box of the weight tensor [K, *filter, C/G].

- fwd: A = x at o - pad + tap*dil (reduction over the group's C/G input channels in BLOCK_K chunks),
  B = w[g*KG + cols, tap, chunk] transposed; result channels of the group are KG.
- bwd_data (stride 1): A = dy at i + pad - tap*dil (reduction over the group's K/G output channels),
  B = w[g*KG + chunk, tap, cols]; result channels are CG.
A chunk that runs past the group's reduction channels reads the next group's activations; fwd multiplies them
with weight channels past C/G, which the weight box zero-fills (the weight tensor is C/G wide), while bwd_data
would meet the next group's weights, so grouped bwd_data needs K/G to be a multiple of BLOCK_K (problem match).
Result columns past the group's channels read other groups' weights and are never stored.

TMA needs 16-byte aligned base pointers and strides: align-8 problems with C/G and K/G multiples of 8 (every
stride of x, dy and w is then a multiple of 8 elements). The output is stored with masks (the box's pixels
past the edge).

On the H200 the 128x256x64 instance gave wrong results (relative error 7e-3 to 5e-2, bwd_data 2-D and 3-D on
most problems, fwd 3-D on one), with the persistent walk and with one tile per program alike, while 7 other
tiles (256x128 and 128x128 among them) were right on the same 40 (problem, dtype) cases
(tools/conv_tma_check.py, twice). The cause (a 256-column tile) is not understood yet, so the validity
predicate refuses block_n > 128. The tiles up to 128 columns are in the fwd / bwd_data `_all` presets; on the
dense stride-1 3x3 layers of the suites they beat the pointer-loading implicit GEMM on most (H200, 2026-11-24:
r3d_18 layer2.conv fwd 134 -> 98 us, bwd_data 175 -> 104 us; ResNet-50 layer3.1.conv2 fwd 27 -> 22 us).
A split of the reduction over (tile, split) units on the persistent walk was tried and withdrawn: on the H200
one instance gave a wrong result (ResNet-50 layer4.1.conv2 fwd, 128x128x64 in 4 splits: relative error 1.1e-2)
while the interpreter and ~90 other split plans were right; the cause is not known (benchmarks/results/
conv_h200.json, re-runs of 2026-11-24). The sweep of 2026-11-24 (data/h200) then found the unsplit 2-D
128x128x64 tile on 4 warps off on 4 fwd and 8 bwd_data 1x1 problems of ~330 each (relative error 5e-3 to
2.4e-2, above bf16's 1e-2 on 2 of each; 7x7 to 28x28 pixels), while every other tile, the same tile on 8 warps
and its 3-D box stayed below 1.7e-3 on all: 128x128 tiles on 4 warps (128 fp32 accumulators per thread, like the refused
128x256 on 8) are refused as well, their cause not known either.
"""
from __future__ import annotations

import math

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels import conv_common as common
from tiledispatch.kernels.gemm_common import DOT_F32, signature_text
from tiledispatch.kernels.spec import ALIGN_BYTES, EntrySpec, LaunchPlan, Param
from tiledispatch.kernels.tma_common import REG_OVERHEAD, REGS_PER_SM, SMEM_PER_SM
from tiledispatch.problems.conv import ConvProblem

FN = "conv_tma_kernel"
BOX_W = 8          # pixels of the innermost spatial dim in a 2-D / 3-D box
BOX_H_3D = 8       # pixels of the middle dim in a 3-D box


def box_unit(ndim: int) -> int:
    """Pixels of one box row (block_m must be a multiple of it): 1-D 1, 2-D a row of BOX_W, 3-D a BOX_H_3D x
    BOX_W plane."""
    return {2: BOX_W, 3: BOX_H_3D * BOX_W}.get(ndim, 1)


def pixel_box(cfg: ConvConfig) -> tuple[int, ...]:
    """The output-pixel box of one program, outermost dim first (its volume is block_m)."""
    return box_of(cfg.ndim, cfg.block_m)


def box_of(ndim: int, pixels: int) -> tuple[int, ...]:
    """A box of `pixels` (a multiple of box_unit(ndim)) pixels, outermost dim first."""
    if ndim == 1:
        return (pixels,)
    if ndim == 2:
        return (pixels // BOX_W, BOX_W)
    return (pixels // (BOX_H_3D * BOX_W), BOX_H_3D, BOX_W)


def entries(cfg: ConvConfig) -> list[EntrySpec]:
    box = pixel_box(cfg)
    params = [p if p.name not in ("x_ptr", "y_ptr", "w_ptr") else Param(p.name, p.ty, divisibility=ALIGN_BYTES)
              for p in common.standard_params(cfg)]
    params += [Param("NUM_PROGRAMS", "i32"), Param("BLOCK_M", "constexpr", cfg.block_m),
               Param("BLOCK_N", "constexpr", cfg.block_n),
               Param("BLOCK_K", "constexpr", cfg.block_k)]
    params += [Param(f"T_{s}", "constexpr", size) for s, size in zip(common.dims(cfg), box)]
    params.append(Param(DOT_F32, "constexpr", False))
    return [EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages)]


def render(cfg: ConvConfig) -> str:
    (entry,) = entries(cfg)
    tile = _program(cfg) + _loop(cfg) + _epilogue(cfg)
    body = (hints(cfg) + _descriptors(cfg) + _tile_count(cfg)
            + "    for tile in range(tl.program_id(0), n_tiles_total, NUM_PROGRAMS):\n"
            + "".join("    " + line if line.strip() else line for line in tile.splitlines(keepends=True)))
    return f"@triton.jit\ndef {FN}(\n    {signature_text(list(entry.params))},\n):\n" + body


# -- launch ------------------------------------------------------------------------------------------------
def pixel_tiles(cfg: ConvConfig, problem: ConvProblem) -> int:
    extents = problem.output if problem.direction == "fwd" else problem.spatial
    return problem.n * math.prod(-(-e // t) for e, t in zip(extents, pixel_box(cfg)))


def tiles(cfg: ConvConfig, problem: ConvProblem) -> int:
    """Output tiles: pixel boxes * groups * column tiles (the column tile varies fastest, then the group)."""
    cols = problem.k_per_group if problem.direction == "fwd" else problem.c_per_group
    return pixel_tiles(cfg, problem) * problem.groups * -(-cols // cfg.block_n)


def programs_per_sm(cfg: ConvConfig) -> int:
    """Resident programs per SM, from the pipelined tiles' shared memory and the accumulator registers."""
    from tiledispatch.configs.conv_validity import shared_memory_bytes

    by_smem = SMEM_PER_SM // max(1, shared_memory_bytes(cfg))
    by_regs = REGS_PER_SM // (cfg.num_warps * 32 * (cfg.block_m * cfg.block_n // (32 * cfg.num_warps)
                                                   + REG_OVERHEAD))
    return max(1, min(by_smem, by_regs))


def grid(cfg: ConvConfig, problem: ConvProblem, sms: int) -> tuple[int, int, int]:
    """Persistent: at most as many programs as fit on the SMs at once, each walking tiles with that stride (the
    tensor descriptors are made once per program)."""
    return (min(tiles(cfg, problem), max(1, sms) * programs_per_sm(cfg)), 1, 1)


def launch_plan(cfg: ConvConfig, problem: ConvProblem, sms: int) -> LaunchPlan:
    programs = grid(cfg, problem, sms)
    return LaunchPlan((programs,), (("NUM_PROGRAMS", programs[0]),))


# -- source pieces -----------------------------------------------------------------------------------------
def hints(cfg: ConvConfig) -> str:
    """C/G, K/G and every non-unit stride are multiples of 8 (the problem match guarantees it)."""
    names = ["C", "K", "CG", "KG", "sx_n", "sy_n", "sw_k"] + [f"s{t}_{s}" for t in "xyw" for s in common.dims(cfg)]
    return "".join(f"    {line}\n" for line in common.multiple_hints(names, 8))


def _tile_count(cfg: ConvConfig) -> str:
    r = common.ROLES[cfg.direction]
    out = [f"    n_tiles = ({r.cols} + BLOCK_N - 1) // BLOCK_N", "    n_tiles_total = N * G * n_tiles"]
    for s in reversed(common.dims(cfg)):
        out += [f"    boxes_{s} = ({r.o_ext}_{s} + T_{s} - 1) // T_{s}", f"    n_tiles_total *= boxes_{s}"]
    return "\n".join(out) + "\n"


def _program(cfg: ConvConfig) -> str:
    """tile -> column tile, group, box origin o0_<s> per dim and image n."""
    out = ["    pid_n = tile % n_tiles", "    rest = tile // n_tiles", "    pid_g = rest % G", "    rest = rest // G"]
    for s in reversed(common.dims(cfg)):
        out += [f"    o0_{s} = (rest % boxes_{s}) * T_{s}", f"    rest = rest // boxes_{s}"]
    out.append("    n = rest")
    return "\n".join(out) + "\n"


def _descriptors(cfg: ConvConfig) -> str:
    r = common.ROLES[cfg.direction]
    ds = common.dims(cfg)
    a_shape = ", ".join(["N", *(f"{r.a_ext}_{s}" for s in ds), r.red_total])
    a_strides = ", ".join([f"{r.a_stride}_n", *(f"{r.a_stride}_{s}" for s in ds), "1"])
    a_box = ", ".join(["1", *(f"T_{s}" for s in ds), "BLOCK_K"])
    w_shape = ", ".join(["K", *(f"flt_{s}" for s in ds), "CG"])
    w_strides = ", ".join(["sw_k", *(f"sw_{s}" for s in ds), "1"])
    ones = ", ".join("1" for _ in ds)
    w_box = f"BLOCK_N, {ones}, BLOCK_K" if cfg.direction == "fwd" else f"BLOCK_K, {ones}, BLOCK_N"
    return (f"    a_desc = tl.make_tensor_descriptor({r.a_ptr}, shape=[{a_shape}], strides=[{a_strides}], "
            f"block_shape=[{a_box}])\n"
            f"    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[{w_shape}], strides=[{w_strides}], "
            f"block_shape=[{w_box}])\n")


def _loop(cfg: ConvConfig) -> str:
    r = common.ROLES[cfg.direction]
    ds, ind = common.dims(cfg), "        "
    out = [f"    n_chunks = ({r.red} + BLOCK_K - 1) // BLOCK_K",
           "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
           "    for it in range(0, " + " * ".join(f"flt_{s}" for s in ds) + " * n_chunks):",
           f"{ind}tap = it // n_chunks", f"{ind}kc = (it - tap * n_chunks) * BLOCK_K"]
    for i, s in enumerate(reversed(ds)):   # innermost filter dim first
        last = i == len(ds) - 1
        out.append(f"{ind}f_{s} = tap" if last else f"{ind}f_{s} = tap % flt_{s}")
        if not last:
            out.append(f"{ind}tap = tap // flt_{s}")
    sign, flip = ("-", "+") if cfg.direction == "fwd" else ("+", "-")   # fwd: o - pad + tap; bwd_data: i + pad - tap
    a_at = ", ".join(["n", *(f"o0_{s} {sign} pad_{s} {flip} f_{s} * dil_{s}" for s in ds),
                      f"pid_g * {r.red} + kc"])
    taps = ", ".join(f"f_{s}" for s in ds)
    out.append(f"{ind}a = a_desc.load([{a_at}]).reshape(BLOCK_M, BLOCK_K)")
    if cfg.direction == "fwd":
        out.append(f"{ind}b = w_desc.load([pid_g * KG + pid_n * BLOCK_N, {taps}, kc]).reshape(BLOCK_N, BLOCK_K).T")
    else:
        out.append(f"{ind}b = w_desc.load([pid_g * KG + kc, {taps}, pid_n * BLOCK_N]).reshape(BLOCK_K, BLOCK_N)")
    out += [f"{ind}if {DOT_F32}:",
            f"{ind}    acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision=\"ieee\")",
            f"{ind}else:", f"{ind}    acc = tl.dot(a, b, acc)"]
    return "\n".join(out) + "\n"


def _epilogue(cfg: ConvConfig) -> str:
    r = common.ROLES[cfg.direction]
    ds = common.dims(cfg)
    out = ["    rm = tl.arange(0, BLOCK_M)", "    m_ok = rm < BLOCK_M", "    rest = rm"]
    o_terms = [f"n.to(tl.int64) * {r.o_stride}_n"]
    for s in reversed(ds):
        out += [f"    p_{s} = o0_{s} + rest % T_{s}", f"    rest = rest // T_{s}",
                f"    m_ok = m_ok & (p_{s} < {r.o_ext}_{s})"]
        o_terms.append(f"p_{s}.to(tl.int64) * {r.o_stride}_{s}")
    out += ["    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)", f"    cn_ok = cn < {r.cols}",
            f"    ch = pid_g * {r.cols} + cn"]
    if cfg.bias:
        out.append("    acc += tl.load(bias_ptr + ch, mask=cn_ok, other=0.0).to(tl.float32)[None, :]")
    text = "\n".join(out) + "\n" + common.activation_line(cfg)
    return (text + f"    o_row = {' + '.join(o_terms)}\n"
            f"    tl.store({r.o_ptr} + (o_row[:, None] + ch[None, :]), acc.to({common.tl_type(cfg.out_dtype)}), "
            "mask=m_ok[:, None] & cn_ok[None, :])\n")
