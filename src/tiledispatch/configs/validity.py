"""The single validity predicate of the GEMM family set, and the config-vs-problem match.

Everything that needs to know whether a config can exist on an arch (registry, codegen, spaces, presets,
tests) calls `gemm_config_errors`; everything that needs to know whether a built kernel computes a problem
calls `gemm_problem_mismatch`.
"""
from __future__ import annotations

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.gemm import GEMM_FAMILIES, GemmConfig
from tiledispatch.dtypes import DTYPES, INPUT_DTYPES
from tiledispatch.errors import InvalidConfig, legal
from tiledispatch.problems.gemm import ACTIVATIONS, BIAS_MODES, LAYOUTS, MAX_D, GemmProblem

BLOCK_MN = (16, 32, 64, 128, 256)
BLOCK_K = (16, 32, 64, 128, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5, 6)
GROUP_M = (1, 2, 4, 8, 16)
SPLIT_K = (2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
ALIGNS = (1, 16)
MAX_ACC_PER_THREAD = 128     # fp32 accumulators per thread above which ptxas spills
MAX_GRID_Y = 65535           # CUDA limit on grid dims 1 and 2 (batch, split)


def _choice(errors: list[tuple[str, str]], field: str, value: object, choices: tuple) -> bool:
    if value not in choices:
        errors.append((field, f"{field}={value!r} not in {legal(choices)}"))
        return False
    return True


def _dtype_errors(cfg: GemmConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    if not _choice(errors, "dtype", cfg.dtype, INPUT_DTYPES):
        return
    if not arch.supports_dtype(cfg.dtype):
        errors.append(("dtype", f"dtype={cfg.dtype!r} is not supported on {arch.name}; "
                                f"legal: {legal(arch.dtypes)}"))
    is_int = cfg.dtype == "int8"
    out_legal = ("int32",) if is_int else ("fp16", "bf16", "fp32")
    _choice(errors, "out_dtype", cfg.out_dtype, out_legal)
    _choice(errors, "acc_dtype", cfg.acc_dtype, ("int32",) if is_int else ("fp32",))
    if is_int and cfg.activation not in ("none", "relu"):
        errors.append(("activation", f"int8 kernels support activation 'none' or 'relu', not {cfg.activation!r}"))


def _tile_errors(cfg: GemmConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    ok = _choice(errors, "block_m", cfg.block_m, BLOCK_MN) & _choice(errors, "block_n", cfg.block_n, BLOCK_MN)
    ok &= _choice(errors, "block_k", cfg.block_k, BLOCK_K) & _choice(errors, "num_warps", cfg.num_warps, WARPS)
    ok &= _choice(errors, "num_stages", cfg.num_stages, STAGES)
    if not ok or cfg.dtype not in DTYPES:
        return
    if cfg.num_warps > arch.max_warps_per_block:
        errors.append(("num_warps", f"num_warps={cfg.num_warps} exceeds {arch.name}'s {arch.max_warps_per_block}"))
    if cfg.dtype == "int8" and cfg.block_k < 32:
        errors.append(("block_k", "int8 dots need block_k >= 32"))
    acc_per_thread = cfg.block_m * cfg.block_n // (32 * cfg.num_warps)
    if acc_per_thread > MAX_ACC_PER_THREAD:
        errors.append(("num_warps", f"{cfg.block_m}x{cfg.block_n} tile with {cfg.num_warps} warps holds "
                                    f"{acc_per_thread} accumulators per thread (max {MAX_ACC_PER_THREAD})"))
    smem = shared_memory_bytes(cfg)
    if smem > arch.smem_per_block:
        errors.append(("num_stages", f"{cfg.num_stages} stages of {cfg.block_m}x{cfg.block_n}x{cfg.block_k} "
                                     f"{cfg.dtype} need {smem} B of shared memory; {arch.name} has "
                                     f"{arch.smem_per_block} B per block"))


def shared_memory_bytes(cfg: GemmConfig) -> int:
    """Shared memory of the pipelined A and B tiles (the dominant term of the kernel's allocation)."""
    stage = (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * DTYPES[cfg.dtype].bytes
    return max(1, cfg.num_stages) * stage


def gemm_config_errors(cfg: GemmConfig, arch: ArchSpec) -> list[tuple[str, str]]:
    """Every reason `cfg` cannot be built for `arch`, as (field, reason); empty when valid."""
    errors: list[tuple[str, str]] = []
    if not _choice(errors, "family", cfg.family, GEMM_FAMILIES):
        return errors
    _choice(errors, "layout", cfg.layout, LAYOUTS)
    _dtype_errors(cfg, arch, errors)
    _tile_errors(cfg, arch, errors)
    _choice(errors, "group_m", cfg.group_m, GROUP_M)
    _choice(errors, "align", cfg.align, ALIGNS)
    if cfg.family == "tiled" and cfg.split_k != 1:
        errors.append(("split_k", f"family 'tiled' needs split_k=1, got {cfg.split_k}"))
    if cfg.family == "splitk":
        _choice(errors, "split_k", cfg.split_k, SPLIT_K)
    _choice(errors, "activation", cfg.activation, ACTIVATIONS)
    _choice(errors, "bias", cfg.bias, BIAS_MODES)
    _choice(errors, "num_d", cfg.num_d, tuple(range(MAX_D + 1)))
    _choice(errors, "with_c", cfg.with_c, (False, True))
    return errors


def is_valid_gemm_config(cfg: GemmConfig, arch: ArchSpec) -> bool:
    return not gemm_config_errors(cfg, arch)


def check_gemm_config(cfg: GemmConfig, arch: ArchSpec) -> GemmConfig:
    """Return cfg, or raise InvalidConfig naming the first offending field."""
    errors = gemm_config_errors(cfg, arch)
    if errors:
        field, reason = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidConfig(f"{cfg.name}: {reason}{more}", field=field)
    return cfg


def gemm_problem_mismatch(cfg: GemmConfig, problem: GemmProblem) -> str | None:
    """None when a kernel built from cfg computes `problem` exactly; otherwise the reason it cannot."""
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
    if cfg.align > problem.align:
        return (f"align: kernel assumes 16-byte aligned pointers and M, N, K and leading dimensions that are "
                f"multiples of 16; the problem guarantees align={problem.align}")
    grid_y = problem.batch * (cfg.split_k if cfg.family == "splitk" else 1)
    if grid_y > MAX_GRID_Y:
        return f"batch: batch*split_k={grid_y} exceeds the grid limit {MAX_GRID_Y}"
    return None
