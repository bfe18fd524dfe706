"""Source pieces of the persistent TMA families: tensor-descriptor parameters (built on the host per launch),
the persistent tile walk, K loops that load through descriptors, and the launch geometry (programs per SM).

Every operand is described as a 3-D tensor [batch, rows, cols] with a unit innermost stride, and a tile is a
[1, rows, cols] box: the descriptor zero-fills outside each batch's matrix, so edge tiles need no masks and
never read a neighbouring batch. An operand shared by every batch (batch stride 0) is a 1-deep tensor.
"""
from __future__ import annotations

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels.spec import Param, Resources
from tiledispatch.problems.gemm import GemmProblem

SMEM_PER_SM = 232448          # bytes of shared memory per SM on sm_90 (228 KiB)
REGS_PER_SM = 65536
REG_OVERHEAD = 64             # registers per thread besides the accumulator (addresses, operands, indices)
TMA_BARRIER_BYTES = 1024      # stage mbarriers of the TMA families (3 stages: 24 B; tma_ws 376-488 B, sm_90)
WS_WARPS = 4                  # Triton 3.6 on sm_90 warp-specializes only kernels compiled with 4 warps


def tma_errors(cfg: GemmConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    """The rules of every family reading its operands through tensor descriptors."""
    if not arch.tma:
        errors.append(("family", f"family {cfg.family!r} needs TMA (sm_90+); {arch.name} has none"))
    if cfg.align != 16:
        errors.append(("align", (f"family {cfg.family!r} reads through tensor descriptors, which need "
                                 f"16-byte aligned strides: align must be 16, got {cfg.align}")))


def ws_warps_errors(cfg: GemmConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    """tma_ws (both forms): warp specialization needs WS_WARPS warps."""
    if cfg.num_warps != WS_WARPS:
        errors.append(("num_warps", (f"warp specialization takes effect on {arch.name} only with num_warps="
                                     f"{WS_WARPS} (Triton ignores it otherwise); got {cfg.num_warps}")))


def ws_batch_mismatch(cfg: GemmConfig, problem: GemmProblem) -> str | None:
    """tma_ws (both forms) computes one matrix."""
    if problem.batch > 1:
        return (f"batch: tma_ws computes one matrix (batch={problem.batch}); Triton 3.6 hangs "
                "warp-specializing the rank-3 descriptors that batches need")
    return None


def persistent_params(cfg: GemmConfig) -> list[Param]:
    """Pointers and sizes shared by the persistent families (batch count and program count at run time)."""
    return [common.ptr("a_ptr", cfg.dtype, cfg.align), common.ptr("b_ptr", cfg.dtype, cfg.align),
            common.ptr("out_ptr", cfg.out_dtype, cfg.align), *common.epilogue_pointer_params(cfg),
            *common.size_params(cfg, "MNK"), Param("BATCH", "i32"), Param("NUM_PROGRAMS", "i32")]


def operand_descriptors(cfg: GemmConfig, rank: int = 3) -> list[Param]:
    """Descriptor parameters of A and B in their stored orientation: a row-major A is [M, K], a column-major
    one [K, M]; a column-major B (K-major) is [N, K], a row-major one [K, N]. rank 2 drops the batch axis
    (tma_ws, which handles one batch: Triton 3.6 hangs warp-specializing rank-3 loads)."""
    a_row, b_row = cfg.layout[0] == "r", cfg.layout[1] == "r"
    a = ("M", "K", cfg.block_m, cfg.block_k, "stride_ar") if a_row else ("K", "M", cfg.block_k, cfg.block_m,
                                                                        "stride_ac")
    b = ("K", "N", cfg.block_k, cfg.block_n, "stride_br") if b_row else ("N", "K", cfg.block_n, cfg.block_k,
                                                                        "stride_bc")
    return [descriptor_param("a", cfg.dtype, *a, "stride_ab", rank),
            descriptor_param("b", cfg.dtype, *b, "stride_bb", rank)]


def device_descriptors(params: list[Param]) -> str:
    """Source lines that make rank-2 descriptors on the device instead of taking them as parameters (tma_ws:
    its warp-specialized loop hung on the H200 loading through descriptor parameters, and Triton 3.6 fails to
    compile its store through one). Each `<name>_desc` is made from the parameters its geometry names."""
    lines = []
    for p in params:
        base, rows, cols, row_stride = p.value.split(",")[:4]
        block = p.ty[p.ty.index("[") + 1:p.ty.index("]")]
        lines.append(f"    {p.name} = tl.make_tensor_descriptor({base}, shape=[{rows}, {cols}], "
                     f"strides=[{row_stride}, 1], block_shape=[{block}])\n")
    return "".join(lines)


def descriptor_param(name: str, dtype: str, rows: str, cols: str, block_rows: int, block_cols: int,
                     row_stride: str, batch_stride: str, rank: int = 3) -> Param:
    """A tensor-descriptor parameter `<name>_desc` over the matrix `<name>_ptr` points to, built on the host
    for each launch (runtime/launcher.py, `host_descriptor`): its value names the parameters that give the
    base tensor, rows, columns and row stride (and, rank 3, the batch stride: [batch, rows, cols] with [1,
    rows, cols] boxes, a 1-deep tensor for an operand shared by every batch, stride 0). Descriptors made on
    the device instead cost each small GEMM 1.5-2 us of start-up on the H200
    (tools/probe_host_descriptors.py)."""
    block = [block_rows, block_cols] if rank == 2 else [1, block_rows, block_cols]
    ty = f"tensordesc<{DTYPES[dtype].triton}[{', '.join(map(str, block))}]>"
    fields = [f"{name}_ptr", rows, cols, row_stride] + ([batch_stride] if rank == 3 else [])
    return Param(f"{name}_desc", ty, ",".join(fields))


def matrix_descriptor(name: str, dtype: str, block_m: int, width: int, rank: int = 3) -> Param:
    """The descriptor parameter over a row-major [batch, M, N] matrix of the epilogue (out, C, D) with
    [BLOCK_M, width] boxes (rank 2: one [M, N] matrix)."""
    prefix = "o" if name == "out" else name
    return descriptor_param(name, dtype, "M", "N", block_m, width, f"stride_{prefix}r", f"stride_{prefix}b",
                            rank)


TILE_WALK = """\
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    tiles_per_batch = num_pid_m * num_pid_n
    num_tiles = tiles_per_batch * BATCH
    k_tiles = (K + BLOCK_K - 1) // BLOCK_K
"""


def tile_coords(indent: str = "        ") -> str:
    """tile_id -> pid_b, off_m, off_n with the group-M swizzle inside each batch; rm/rn index vectors."""
    lines = ["pid_b = tile_id // tiles_per_batch", "t = tile_id % tiles_per_batch",
             "group_id = t // (GROUP_M * num_pid_n)", "first_pid_m = group_id * GROUP_M",
             "group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
             "pid_m = first_pid_m + ((t % (GROUP_M * num_pid_n)) % group_size_m)",
             "pid_n = (t % (GROUP_M * num_pid_n)) // group_size_m",
             "off_m = pid_m * BLOCK_M", "off_n = pid_n * BLOCK_N",
             "rm = off_m + tl.arange(0, BLOCK_M)", "rn = off_n + tl.arange(0, BLOCK_N)"]
    return "".join(f"{indent}{line}\n" for line in lines)


def tile_loads(cfg: GemmConfig, indent: str, rank: int = 3) -> str:
    """Load the A tile as [BLOCK_M, BLOCK_K] and the B tile as [BLOCK_K, BLOCK_N] at K offset `off_k`."""
    a_at = (("off_m, off_k", "BLOCK_M, BLOCK_K", "") if cfg.layout[0] == "r"
            else ("off_k, off_m", "BLOCK_K, BLOCK_M", ".T"))
    b_at = (("off_k, off_n", "BLOCK_K, BLOCK_N", "") if cfg.layout[1] == "r"
            else ("off_n, off_k", "BLOCK_N, BLOCK_K", ".T"))
    lines = []
    for name, (at, shape, trans) in (("a", a_at), ("b", b_at)):
        if rank == 3:
            lines.append(f"{indent}{name} = {name}_desc.load([{name}_bi, {at}]).reshape({shape}){trans}\n")
        else:
            lines.append(f"{indent}{name} = {name}_desc.load([{at}]){trans}\n")
    return "".join(lines)


def k_loop(cfg: GemmConfig, k_lo: str, k_hi: str, indent: str = "        ", rank: int = 3) -> str:
    """acc = A[tile, k_lo*BK : k_hi*BK] @ B[...] (fp32/int32 accumulator), K blocks loaded through TMA."""
    acc_ty = common.TL_TYPES[cfg.acc_dtype]
    body = indent + "    "
    dot = common.dot_line(cfg).replace("\n        ", "\n" + body)
    # rank 3: the batch each operand is read from (an operand shared by every batch has one)
    batch = ("".join(f"{indent}{x}_bi = tl.where(stride_{x}b == 0, 0, pid_b)\n" for x in "ab")
             if rank == 3 else "")
    return (batch + f"{indent}acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={acc_ty})\n"
            f"{indent}for ki in range({k_lo}, {k_hi}):\n"
            f"{body}off_k = ki * BLOCK_K\n"
            + tile_loads(cfg, body, rank)
            + f"{body}{dot}\n")


def indent_block(text: str, extra: str) -> str:
    return "".join(extra + line if line.strip() else line for line in text.splitlines(keepends=True))


def programs_per_sm(cfg: GemmConfig, held: Resources) -> int:
    """Resident programs per SM, from shared memory and accumulator registers (at least 1); `held`: the
    family's resource estimate of cfg."""
    by_smem = SMEM_PER_SM // max(1, held.shared_memory)
    warps = held.warps + (cfg.num_warps if cfg.family == "tma_ws" else 0)   # + producer group
    acc_per_thread = cfg.block_m * cfg.block_n // (32 * held.warps)
    by_regs = REGS_PER_SM // (warps * 32 * (acc_per_thread + REG_OVERHEAD))
    return max(1, min(by_smem, by_regs))
