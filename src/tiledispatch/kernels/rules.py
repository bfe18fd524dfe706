"""The op-wide validity rules: what every GEMM and every conv config and problem must satisfy, whatever the
family.

`gemm_errors` / `conv_errors` run these rules around the family module's own config_errors, in a fixed order
(the first error names the field that InvalidConfig reports); `gemm_mismatch` / `conv_mismatch` come before
the family's problem_mismatch. kernels/family.py gives every caller the predicates built on them.
"""
from __future__ import annotations

import math
from types import ModuleType

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import KLOOPS, ConvConfig
from tiledispatch.configs.fields import choice
from tiledispatch.configs.gemm import TMA_FAMILIES, GemmConfig
from tiledispatch.dtypes import DTYPES, INPUT_DTYPES, SCALED_DTYPES
from tiledispatch.errors import legal
from tiledispatch.kernels.spec import Resources
from tiledispatch.problems.conv import CONV_ALIGNS, CONV_DTYPES, DIRECTIONS, NDIMS, ConvProblem
from tiledispatch.problems.gemm import ACTIVATIONS, BIAS_MODES, LAYOUTS, MAX_D, GemmProblem

Errors = list[tuple[str, str]]

MAX_ACC_PER_THREAD = 128     # fp32 accumulators per thread above which ptxas spills
MAX_GRID_YZ = 65535          # CUDA limit on grid dims 1 and 2
INT32_LIMIT = 2**31 - 1

# ---- GEMM --------------------------------------------------------------------------------------------------
BLOCK_MN = (16, 32, 64, 128, 256)
BLOCK_K = (16, 32, 64, 128, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16)   # deep pipelines suit small tiles (shared memory permitting)
GROUP_M = (1, 2, 4, 8, 16)
SPLIT_K = (2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256)   # > 64: family splitk only (its folded reduce)
ALIGNS = (1, 4, 8, 16)   # alignment in bytes a kernel assumes (pointers, leading dims, unit-stride sizes)
SUBTILES = (0, 1, 2)         # 0: stores through pointers (tma_persistent, streamk), no staging buffer
FP8_MAX_BLOCK_K = 128        # fp8 dots promote to fp32 once per K block (kernels/gemm_common.dot_line)
WS_FP8_WIDE_M = (192,)       # fp8 tma_ws only (three 64-row consumer warp groups): not a power of two


def is_ws_fp8(cfg: GemmConfig) -> bool:
    """Whether cfg is the Gluon form of tma_ws (fp8, kernels/gemm_ws_fp8.py), a family module of its own."""
    return cfg.family == "tma_ws" and cfg.dtype in SCALED_DTYPES


def tile_resources(cfg: GemmConfig, warps: int, extra_bytes: int = 0) -> Resources:
    """A GEMM program's resources: num_stages pipelined A and B tiles plus `extra_bytes` of shared memory, and
    the accumulator tile over `warps` warps (fp8: the wgmma partial sums live beside the promoted fp32
    accumulator)."""
    stage = (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * DTYPES[cfg.dtype].bytes
    acc = cfg.block_m * cfg.block_n // (32 * warps)
    held = 2 * acc if cfg.dtype in SCALED_DTYPES else acc
    return Resources(max(1, cfg.num_stages) * stage + extra_bytes, held, warps)


def _dtype_errors(cfg: GemmConfig, arch: ArchSpec, errors: Errors) -> None:
    if not choice(errors, "dtype", cfg.dtype, INPUT_DTYPES):
        return
    if not arch.supports_dtype(cfg.dtype):
        errors.append(("dtype", (f"dtype={cfg.dtype!r} is not supported on {arch.name}; "
                                 f"legal: {legal(arch.dtypes)}")))
    is_int = cfg.dtype == "int8"
    out_legal = ("int32",) if is_int else ("fp16", "bf16", "fp32")
    if cfg.dtype in SCALED_DTYPES:
        if cfg.layout != "rcr":
            errors.append(("layout", (f"{cfg.dtype} kernels need layout 'rcr' (K-major B for fp8 wgmma), "
                                      f"not {cfg.layout!r}")))
        if cfg.block_k < 32 or cfg.block_k > FP8_MAX_BLOCK_K:
            errors.append(("block_k", (f"{cfg.dtype} kernels need 32 <= block_k <= {FP8_MAX_BLOCK_K}, "
                                       f"got {cfg.block_k}")))
    choice(errors, "out_dtype", cfg.out_dtype, out_legal)
    choice(errors, "acc_dtype", cfg.acc_dtype, ("int32",) if is_int else ("fp32",))
    if is_int and cfg.activation not in ("none", "relu"):
        errors.append(("activation", (f"int8 kernels support activation 'none' or 'relu', "
                                      f"not {cfg.activation!r}")))


def _tile_errors(cfg: GemmConfig, arch: ArchSpec, family: ModuleType, errors: Errors) -> None:
    m_legal = BLOCK_MN + WS_FP8_WIDE_M if is_ws_fp8(cfg) else BLOCK_MN
    ok = choice(errors, "block_m", cfg.block_m, m_legal) & choice(errors, "block_n", cfg.block_n, BLOCK_MN)
    ok &= choice(errors, "block_k", cfg.block_k, BLOCK_K) & choice(errors, "num_warps", cfg.num_warps, WARPS)
    ok &= choice(errors, "num_stages", cfg.num_stages, STAGES)
    if not ok or cfg.dtype not in DTYPES:
        return
    if cfg.num_warps > arch.max_warps_per_block:
        errors.append(("num_warps", (f"num_warps={cfg.num_warps} exceeds {arch.name}'s "
                                     f"{arch.max_warps_per_block}")))
    if cfg.dtype == "int8" and cfg.block_k < 32:
        errors.append(("block_k", "int8 dots need block_k >= 32"))
    held = family.resources(cfg)
    if held.accumulators > MAX_ACC_PER_THREAD:
        errors.append(("num_warps", (f"{cfg.block_m}x{cfg.block_n} tile with {cfg.num_warps} warps holds "
                                     f"{held.accumulators} accumulators per thread (max "
                                     f"{MAX_ACC_PER_THREAD})")))
    if held.shared_memory > arch.smem_per_block:
        errors.append(("num_stages", (f"{cfg.num_stages} stages of {cfg.block_m}x{cfg.block_n}x{cfg.block_k} "
                                      f"{cfg.dtype} need {held.shared_memory} B of shared memory; "
                                      f"{arch.name} has {arch.smem_per_block} B per block")))


def unsplit_errors(cfg: GemmConfig, errors: Errors, note: str = "") -> None:
    """A family that does not split K needs split_k=1."""
    if cfg.split_k != 1:
        errors.append(("split_k", f"family {cfg.family!r} needs split_k=1{note}, got {cfg.split_k}"))


def subtile_errors(cfg: GemmConfig, errors: Errors, subtiles: bool) -> None:
    """subtile is one of SUBTILES; other than 1 only where the family `subtiles` its epilogue."""
    if choice(errors, "subtile", cfg.subtile, SUBTILES) and cfg.subtile != 1:
        if not subtiles:
            errors.append(("subtile", (f"epilogue subtiling is a feature of tma_persistent and streamk; "
                                       f"{cfg.family!r} needs subtile=1")))
        elif cfg.subtile and cfg.block_n // cfg.subtile < 16:
            errors.append(("subtile", f"block_n={cfg.block_n} split in {cfg.subtile} is below 16 columns"))


def gemm_errors(cfg: GemmConfig, arch: ArchSpec, family: ModuleType, errors: Errors) -> None:
    """Append every reason a GEMM config of a known family cannot be built for `arch`: the op-wide rules and
    those of `family` (its module)."""
    choice(errors, "layout", cfg.layout, LAYOUTS)
    _dtype_errors(cfg, arch, errors)
    _tile_errors(cfg, arch, family, errors)
    choice(errors, "group_m", cfg.group_m, GROUP_M)
    choice(errors, "align", cfg.align, ALIGNS)
    family.config_errors(cfg, arch, errors)
    choice(errors, "activation", cfg.activation, ACTIVATIONS)
    choice(errors, "bias", cfg.bias, BIAS_MODES)
    choice(errors, "num_d", cfg.num_d, tuple(range(MAX_D + 1)))
    choice(errors, "with_c", cfg.with_c, (False, True))


def gemm_mismatch(cfg: GemmConfig, problem: GemmProblem) -> str | None:
    """Why no GEMM kernel built from cfg computes `problem`, whatever its family (None: the family says)."""
    checks = (
        ("layout", cfg.layout, problem.layout),
        ("dtype", cfg.dtype, problem.dtype),
        ("out_dtype", cfg.out_dtype, problem.out_dtype),
        ("acc_dtype", cfg.acc_dtype, problem.acc_dtype),
        ("epilogue", cfg.epilogue, problem.epilogue),
    )
    for field, have, want in checks:
        if have != want:
            return f"{field}: kernel has {have!r}, problem needs {want!r}"
    need = max(1, cfg.align // DTYPES[cfg.dtype].bytes)   # elements of the input type in cfg.align bytes
    if problem.align < need:
        how = ("reads through tensor descriptors, which need" if cfg.family in TMA_FAMILIES
               else f"loads {cfg.align}-byte vectors, which need")
        return (f"align: {cfg.family} {how} {cfg.align}-byte aligned pointers, and leading dimensions and "
                f"sizes along unit strides of {cfg.align} bytes (align >= {need} for {cfg.dtype}); the "
                f"problem guarantees align={problem.align}")
    return None


def grid_mismatch(programs_y: int) -> str | None:
    """Batches (times splits where they sit on the same axis) run on grid dim 1."""
    if programs_y > MAX_GRID_YZ:
        return f"batch: batch*split_k={programs_y} exceeds the grid limit {MAX_GRID_YZ}"
    return None


# ---- conv --------------------------------------------------------------------------------------------------
CONV_WARPS = (1, 2, 4, 8, 16)
CONV_STAGES = (1, 2, 3, 4, 5)
CONV_SPLIT_K = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)


def _conv_common_errors(cfg: ConvConfig, arch: ArchSpec, errors: Errors) -> None:
    choice(errors, "direction", cfg.direction, DIRECTIONS)
    choice(errors, "ndim", cfg.ndim, NDIMS)
    if choice(errors, "dtype", cfg.dtype, CONV_DTYPES) and not arch.supports_dtype(cfg.dtype):
        errors.append(("dtype", f"dtype={cfg.dtype!r} is not supported on {arch.name}"))
    choice(errors, "out_dtype", cfg.out_dtype, CONV_DTYPES)
    choice(errors, "acc_dtype", cfg.acc_dtype, ("fp32",))
    choice(errors, "num_warps", cfg.num_warps, CONV_WARPS)
    choice(errors, "num_stages", cfg.num_stages, CONV_STAGES)
    choice(errors, "align", cfg.align, CONV_ALIGNS)
    choice(errors, "kloop", cfg.kloop, KLOOPS)
    choice(errors, "split_k", cfg.split_k, CONV_SPLIT_K)
    choice(errors, "activation", cfg.activation, ACTIVATIONS)
    choice(errors, "bias", cfg.bias, (False, True))
    if cfg.direction != "fwd" and (cfg.bias or cfg.activation != "none"):
        errors.append(("bias" if cfg.bias else "activation",
                       f"the fused epilogue exists for direction 'fwd' only, not {cfg.direction!r}"))
    splits_gemm = cfg.family in ("igemm", "tma") or cfg.kloop == "im2col"
    if cfg.direction != "bwd_weight" and not splits_gemm and cfg.split_k not in (0, 1):
        errors.append(("split_k", ("split_k splits the reduction of igemm, tma, im2col and of bwd_weight; "
                                   f"family {cfg.family!r} in direction {cfg.direction!r} needs 0")))


def _conv_align_errors(cfg: ConvConfig, errors: Errors) -> None:
    """align 2 and 4 (4- and 8-byte channel vectors) exist for the direct family and the 1x1 GEMM (family
    'gemm', kloop 'tap': the GEMM's rows of 2 or 4 elements, kernels/conv_gemm.gemm_align)."""
    if cfg.align in (2, 4) and cfg.family != "direct" and (cfg.family, cfg.kloop) != ("gemm", "tap"):
        errors.append(("align", (f"align {cfg.align} exists for family 'direct' and the 1x1 GEMM (family "
                                 f"'gemm', kloop 'tap') only; family {cfg.family!r} kloop {cfg.kloop!r} "
                                 "takes 1 or 8")))


def conv_errors(cfg: ConvConfig, arch: ArchSpec, family: ModuleType, errors: Errors) -> None:
    """Append every reason a conv config of a known family cannot be built for `arch`: the op-wide rules and
    those of `family` (its module)."""
    _conv_common_errors(cfg, arch, errors)
    _conv_align_errors(cfg, errors)
    family.config_errors(cfg, arch, errors)


def conv_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Why no conv kernel built from cfg computes `problem`, whatever its family (None: the family says)."""
    checks = (("direction", cfg.direction, problem.direction), ("ndim", cfg.ndim, problem.ndim),
              ("dtype", cfg.dtype, problem.dtype), ("out_dtype", cfg.out_dtype, problem.out_dtype),
              ("acc_dtype", cfg.acc_dtype, problem.acc_dtype), ("bias", cfg.bias, problem.bias),
              ("activation", cfg.activation, problem.activation))
    for field, have, want in checks:
        if have != want:
            return f"{field}: kernel has {have!r}, problem needs {want!r}"
    if cfg.align > problem.align:
        return (f"align: kernel assumes 16-byte aligned activations with channel totals and strides that are "
                f"multiples of {cfg.align}; the problem guarantees align={problem.align}")
    return None


def phases_mismatch(problem: ConvProblem) -> str | None:
    """bwd_data grids of igemm and direct have a layer per stride phase, on a grid axis of at most
    MAX_GRID_YZ."""
    phases = math.prod(problem.stride) if problem.direction == "bwd_data" else 1
    if phases > MAX_GRID_YZ:
        return f"stride: {phases} stride phases exceed the grid limit {MAX_GRID_YZ}"
    return None
