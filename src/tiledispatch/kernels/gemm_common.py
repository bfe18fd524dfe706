"""Source pieces shared by the GEMM families: parameters, tile swizzle, main loop and fused epilogue."""
from __future__ import annotations

from tiledispatch.configs.gemm import TMA_FAMILIES, GemmConfig
from tiledispatch.dtypes import DTYPES, SCALED_DTYPES
from tiledispatch.kernels.spec import ALIGN_BYTES, Param
from tiledispatch.problems.gemm import contiguous_dims

TL_TYPES = {"fp16": "tl.float16", "bf16": "tl.bfloat16", "fp32": "tl.float32", "int32": "tl.int32",
            "fp8e4m3": "tl.float8e4nv"}
# The interpreter of Triton 3.6 multiplies bf16 dot operands wrongly; DOT_F32 (False in every compiled
# kernel) lets the CPU interpreter run the same kernel with fp32 dot operands instead.
DOT_F32 = "DOT_F32"


def ptr(name: str, dtype: str, align: int = 1) -> Param:
    """A pointer known to be `align`-byte aligned (1: nothing known)."""
    return Param(name, "*" + DTYPES[dtype].triton, divisibility=align)


def hint(cfg: GemmConfig) -> int:
    """The factor aligned pointer-loading kernels are compiled to know of sizes along unit strides and of
    strides: `align` bytes of the input type (a16: 8 elements of fp16 / bf16, 16 of fp8 / int8, 4 of fp32; a4:
    2 of fp16 / bf16), which the output's leading dimension also has (its type is at least as wide). 1:
    nothing known (align-1 kernels, and the TMA families, which take strides as descriptor fields; but a
    tma_persistent or streamk kernel storing through pointers, subtile 0, knows them: they vectorize its
    stores)."""
    pointer_stores = cfg.family in ("tma_persistent", "streamk") and cfg.subtile == 0
    if cfg.align == 1 or (cfg.family in TMA_FAMILIES and not pointer_stores):
        return 1
    return max(1, cfg.align // DTYPES[cfg.dtype].bytes)


def size_params(cfg: GemmConfig, names: str) -> list[Param]:
    """M, N, K as i32; aligned kernels know the factor `hint` of the sizes along unit strides (vector loads,
    edge masks per vector); the others may be anything."""
    hinted_dims = contiguous_dims(cfg.layout) if hint(cfg) > 1 else ()
    return [Param(name, "i32", divisibility=hint(cfg) if name in hinted_dims else 1) for name in names]


def strides(prefix: str, layout_letter: str | None, factor: int) -> list[Param]:
    """Batch, row and column strides of a matrix operand, known multiples of `factor`; the contiguous one is
    the constexpr 1."""
    row_unit = layout_letter == "c"
    col_unit = layout_letter == "r"
    params = [Param(f"stride_{prefix}b", "i64", divisibility=factor)]
    for axis, unit in (("r", row_unit), ("c", col_unit)):
        name = f"stride_{prefix}{axis}"
        params.append(Param(name, "constexpr", 1) if unit else Param(name, "i64", divisibility=factor))
    return params


def operand_params(cfg: GemmConfig) -> list[Param]:
    return [*strides("a", cfg.layout[0], hint(cfg)), *strides("b", cfg.layout[1], hint(cfg))]


def epilogue_pointer_params(cfg: GemmConfig) -> list[Param]:
    align, out = ALIGN_BYTES if cfg.align == 16 else 1, []   # only a16 kernels know their epilogue operands
    if cfg.with_c:
        out.append(ptr("c_ptr", cfg.out_dtype, align))
    if cfg.bias != "none":
        out.append(ptr("bias_ptr", cfg.out_dtype, align))
    out.extend(ptr(f"d{i}_ptr", cfg.out_dtype, align) for i in range(cfg.num_d))
    if cfg.dtype in SCALED_DTYPES:
        out += [Param("scale_a_ptr", "*fp32"), Param("scale_b_ptr", "*fp32")]
    return out


def epilogue_scalar_params(cfg: GemmConfig) -> list[Param]:
    factor = hint(cfg)
    out = [*strides("o", cfg.layout[2], factor)]
    extra_letter = cfg.layout[2] if cfg.align == 16 else None   # aligned kernels read C and D like the output
    if cfg.with_c:
        out.extend(strides("c", extra_letter, factor))
    if cfg.bias != "none":
        out.append(Param("stride_biasb", "i64", divisibility=factor))
    for i in range(cfg.num_d):
        out.extend(strides(f"d{i}", extra_letter, factor))
    scalar = "i32" if cfg.acc_dtype == "int32" else "fp32"
    out.append(Param("alpha", scalar))
    if cfg.with_c:
        out.append(Param("beta", scalar))
    return out


def tile_constexprs(cfg: GemmConfig) -> list[Param]:
    return [Param("BLOCK_M", "constexpr", cfg.block_m), Param("BLOCK_N", "constexpr", cfg.block_n),
            Param("BLOCK_K", "constexpr", cfg.block_k), Param("GROUP_M", "constexpr", cfg.group_m),
            Param(DOT_F32, "constexpr", False)]


def tile_count(cfg: GemmConfig, m: int, n: int, batch: int = 1) -> int:
    """Output tiles of cfg's BLOCK_M x BLOCK_N over an M x N result, times the batch."""
    return -(-m // cfg.block_m) * -(-n // cfg.block_n) * batch


def signature_text(params: list[Param]) -> str:
    parts = [f"{p.name}: tl.constexpr" if p.is_constexpr else p.name for p in params]
    return ",\n    ".join(parts)


SWIZZLE = """\
    pid = tl.program_id(0)
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
"""


def dot_line(cfg: GemmConfig) -> str:
    if cfg.acc_dtype == "int32":
        return "acc += tl.dot(a, b, out_dtype=tl.int32)"
    if cfg.dtype in SCALED_DTYPES:
        # fp8 wgmma accumulates in reduced precision, so each K block's product is promoted into the fp32
        # accumulator: a dot of its own (reduced precision over at most BLOCK_K <= 128 products) added by an
        # FMA outside it. Same arithmetic as max_num_imprecise_acc=BLOCK_K, but that form adds the partial
        # to the accumulator inside the dot, where ptxas serializes the wgmma group; this one leaves Triton's
        # single wait per K block (tools/probe_fp8.py: 8192^3 on the H200, 128x128x128 w4 tma_ws
        # 1053 -> 1157 TF/s, same error).
        compiled = "acc = tl.fma(tl.dot(a, b), 1.0, acc)"
    else:
        precision = "tf32" if cfg.dtype == "tf32" else "ieee"
        compiled = f"acc = tl.dot(a, b, acc, input_precision=\"{precision}\")"
    return (f"if {DOT_F32}:\n"
            f"            acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision=\"ieee\")\n"
            f"        else:\n"
            f"            {compiled}")


def main_loop(cfg: GemmConfig, k_start: str, k_end: str) -> str:
    """Accumulate A[rm, k_start:k_end] @ B[k_start:k_end, rn] into `acc` (int64 addressing, K masked).

    k_start and k_end - k_start are multiples of BLOCK_K except at K itself, so masking against K (whose
    divisibility aligned kernels know) is exact and keeps the loads vectorized.
    """
    acc_ty = TL_TYPES[cfg.acc_dtype]
    zero = "0" if cfg.dtype == "int8" else "0.0"
    return f"""\
    rm_safe = (rm % M).to(tl.int64)
    rn_safe = (rn % N).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    k_first = {k_start}
    a_ptrs = (a_ptr + pid_b.to(tl.int64) * stride_ab + rm_safe[:, None] * stride_ar
              + (k_first + rk)[None, :].to(tl.int64) * stride_ac)
    b_ptrs = (b_ptr + pid_b.to(tl.int64) * stride_bb + (k_first + rk)[:, None].to(tl.int64) * stride_br
              + rn_safe[None, :] * stride_bc)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={acc_ty})
    k_last = {k_end}
    for k0 in range(k_first, k_last, BLOCK_K):
        k_mask = (k0 + rk) < K
        a = tl.load(a_ptrs, mask=k_mask[None, :], other={zero})
        b = tl.load(b_ptrs, mask=k_mask[:, None], other={zero})
        {dot_line(cfg)}
        a_ptrs += BLOCK_K * stride_ac
        b_ptrs += BLOCK_K * stride_br
"""


# Only core builtins: Triton's library helpers (tl.cdiv, tl.sigmoid) are @jit functions that the CPU
# interpreter cannot call when Triton was imported without TRITON_INTERPRET.
# gelu_tanh uses 0.5*(1 + tanh(y)) = 1/(1 + exp(-2y)); tanh(x) = 2/(1 + exp(-2x)) - 1.
ACTIVATION_EXPR = {
    "none": "{x}",
    "relu": "tl.maximum({x}, 0, propagate_nan=tl.PropagateNan.ALL)",   # relu(NaN) is NaN, as torch's
    "gelu": "0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))",
    "gelu_tanh": "{x} / (1.0 + tl.exp(-1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x})))",
    "silu": "{x} / (1.0 + tl.exp(-{x}))",
    "sigmoid": "1.0 / (1.0 + tl.exp(-{x}))",
    "tanh": "2.0 / (1.0 + tl.exp(-2.0 * {x})) - 1.0",
}


def scale_expr(cfg: GemmConfig) -> str:
    """The factor applied to the accumulator first: alpha, times the per-tensor scales of fp8 operands."""
    if cfg.dtype in SCALED_DTYPES:
        return "(alpha * tl.load(scale_a_ptr) * tl.load(scale_b_ptr))"
    return "alpha"


def _matrix_load(name: str, acc_ty: str) -> str:
    return (f"tl.load({name}_ptr + pid_b.to(tl.int64) * stride_{name}b + rm64[:, None] * stride_{name}r"
            f" + rn64[None, :] * stride_{name}c, mask=mask, other=0).to({acc_ty})")


def epilogue(cfg: GemmConfig) -> str:
    """alpha*acc + beta*C + bias + D0 + D1 -> activation -> cast -> masked store to out."""
    acc_ty = TL_TYPES[cfg.acc_dtype]
    lines = ["    rm64 = rm.to(tl.int64)", "    rn64 = rn.to(tl.int64)",
             "    mask = (rm[:, None] < M) & (rn[None, :] < N)", "    acc = acc * " + scale_expr(cfg)]
    if cfg.with_c:
        lines.append(f"    acc += beta * {_matrix_load('c', acc_ty)}")
    if cfg.bias == "row":
        lines.append(f"    acc += tl.load(bias_ptr + pid_b.to(tl.int64) * stride_biasb + rm64, mask=rm < M, "
                     f"other=0).to({acc_ty})[:, None]")
    elif cfg.bias == "col":
        lines.append(f"    acc += tl.load(bias_ptr + pid_b.to(tl.int64) * stride_biasb + rn64, mask=rn < N, "
                     f"other=0).to({acc_ty})[None, :]")
    for i in range(cfg.num_d):
        lines.append(f"    acc += {_matrix_load(f'd{i}', acc_ty)}")
    if cfg.activation != "none":
        lines.append("    acc = " + ACTIVATION_EXPR[cfg.activation].format(x="acc"))
    lines.append("    o_ptrs = out_ptr + pid_b.to(tl.int64) * stride_ob + rm64[:, None] * stride_or"
                 " + rn64[None, :] * stride_oc")
    lines.append(f"    tl.store(o_ptrs, acc.to({TL_TYPES[cfg.out_dtype]}), mask=mask)")
    return "\n".join(lines) + "\n"


def last_arrival(counter: str, first: str, slot: str, indent: str, load_args: str = "") -> str:
    """Lines that count this program's arrival at `counter` (an index into count_ptr) once its partial is
    stored, then open a block run only by the program that arrives last of SPLIT_K: it sets the counter back
    to zero for the next launch and sums the SPLIT_K partial slots into `acc` in split order (the same sum
    whoever arrives last): slot 0 at address `first`, slot s at `slot` (an expression of s). The barrier makes
    every thread's partial stores precede the release (the atomic is one thread's); the loads read other
    programs' stores, so they bypass L1 (cache_modifier=".cg")."""
    load = f'{load_args}cache_modifier=".cg"'
    lines = ["tl.debug_barrier()",
             f'arrived = tl.atomic_add(count_ptr + {counter}, 1, sem="acq_rel", scope="gpu")',
             "if arrived == SPLIT_K - 1:", f"    tl.store(count_ptr + {counter}, 0)",
             f"    acc = tl.load({first}, {load})",
             "    for s in tl.static_range(1, SPLIT_K):",
             f"        acc += tl.load({slot}, {load})"]
    return "".join(f"{indent}{line}\n" for line in lines)
