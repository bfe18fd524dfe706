"""The single validity predicate of the GEMM family set, and the config-vs-problem match.

Everything that needs to know whether a config can exist on an arch (registry, codegen, spaces, presets,
tests) calls `gemm_config_errors`; everything that needs to know whether a built kernel computes a problem
calls `gemm_problem_mismatch`.
"""
from __future__ import annotations

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.fields import choice, raise_first_error
from tiledispatch.configs.gemm import GEMM_FAMILIES, TMA_FAMILIES, GemmConfig
from tiledispatch.dtypes import DTYPES, INPUT_DTYPES, SCALED_DTYPES
from tiledispatch.errors import legal
from tiledispatch.problems.gemm import ACTIVATIONS, BIAS_MODES, LAYOUTS, MAX_D, PROBLEM_ALIGNS, GemmProblem

BLOCK_MN = (16, 32, 64, 128, 256)
BLOCK_K = (16, 32, 64, 128, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16)   # deep pipelines suit small tiles (shared memory permitting)
GROUP_M = (1, 2, 4, 8, 16)
SPLIT_K = (2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256)   # > 64: family splitk only (its folded reduce)
MAX_TMA_SPLIT_K = 64
TMA_BARRIER_BYTES = 1024      # the TMA families' stage mbarriers (24 B for 3 stages; tma_ws 376-488 B on sm_90)
MAX_WS_STAGES = 4              # the deepest tma_ws pipeline measured correct (benchmarks/results/profiles)
ALIGNS = (1, 4, 8, 16)   # bytes of alignment (pointers, leading dimensions, unit-stride sizes) a kernel assumes
MAX_ACC_PER_THREAD = 128     # fp32 accumulators per thread above which ptxas spills
MAX_GRID_Y = 65535           # CUDA limit on grid dims 1 and 2 (batch, split)
SUBTILES = (0, 1, 2)         # 0: stores through pointers (tma_persistent, streamk), no staging buffer
WS_WARPS = 4                 # Triton 3.6 on sm_90 warp-specializes only kernels compiled with 4 warps
FP8_MAX_BLOCK_K = 128        # fp8 dots promote to fp32 once per K block (kernels/gemm_common.dot_line)
SPLIT_FAMILIES = ("splitk", "tma_persistent")   # split_k > 1: K split over programs, partials summed in order


def _dtype_errors(cfg: GemmConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    if not choice(errors, "dtype", cfg.dtype, INPUT_DTYPES):
        return
    if not arch.supports_dtype(cfg.dtype):
        errors.append(("dtype", f"dtype={cfg.dtype!r} is not supported on {arch.name}; "
                                f"legal: {legal(arch.dtypes)}"))
    is_int = cfg.dtype == "int8"
    out_legal = ("int32",) if is_int else ("fp16", "bf16", "fp32")
    if cfg.dtype in SCALED_DTYPES:
        if cfg.layout != "rcr":
            errors.append(("layout", f"{cfg.dtype} kernels need layout 'rcr' (K-major B for fp8 wgmma), "
                                     f"not {cfg.layout!r}"))
        if cfg.block_k < 32 or cfg.block_k > FP8_MAX_BLOCK_K:
            errors.append(("block_k", f"{cfg.dtype} kernels need 32 <= block_k <= {FP8_MAX_BLOCK_K}, "
                                      f"got {cfg.block_k}"))
    choice(errors, "out_dtype", cfg.out_dtype, out_legal)
    choice(errors, "acc_dtype", cfg.acc_dtype, ("int32",) if is_int else ("fp32",))
    if is_int and cfg.activation not in ("none", "relu"):
        errors.append(("activation", f"int8 kernels support activation 'none' or 'relu', not {cfg.activation!r}"))


def _tile_errors(cfg: GemmConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    m_legal = BLOCK_MN + WS_FP8_WIDE_M if is_ws_fp8(cfg) else BLOCK_MN
    ok = choice(errors, "block_m", cfg.block_m, m_legal) & choice(errors, "block_n", cfg.block_n, BLOCK_MN)
    ok &= choice(errors, "block_k", cfg.block_k, BLOCK_K) & choice(errors, "num_warps", cfg.num_warps, WARPS)
    ok &= choice(errors, "num_stages", cfg.num_stages, STAGES)
    if not ok or cfg.dtype not in DTYPES:
        return
    if cfg.num_warps > arch.max_warps_per_block:
        errors.append(("num_warps", f"num_warps={cfg.num_warps} exceeds {arch.name}'s {arch.max_warps_per_block}"))
    if cfg.dtype == "int8" and cfg.block_k < 32:
        errors.append(("block_k", "int8 dots need block_k >= 32"))
    acc_per_thread = cfg.block_m * cfg.block_n // (32 * compute_warps(cfg))
    if cfg.dtype in SCALED_DTYPES:
        acc_per_thread *= 2     # the wgmma partial sums live beside the promoted fp32 accumulator
    if acc_per_thread > MAX_ACC_PER_THREAD:
        errors.append(("num_warps", f"{cfg.block_m}x{cfg.block_n} tile with {cfg.num_warps} warps holds "
                                    f"{acc_per_thread} accumulators per thread (max {MAX_ACC_PER_THREAD})"))
    smem = shared_memory_bytes(cfg)
    if smem > arch.smem_per_block:
        errors.append(("num_stages", f"{cfg.num_stages} stages of {cfg.block_m}x{cfg.block_n}x{cfg.block_k} "
                                     f"{cfg.dtype} need {smem} B of shared memory; {arch.name} has "
                                     f"{arch.smem_per_block} B per block"))


def compute_warps(cfg: GemmConfig) -> int:
    """Warps holding the accumulator: a warp-specialized kernel of 4 warps gets two consumer warp groups (fp8:
    one per 64 rows of the tile)."""
    if is_ws_fp8(cfg):
        return cfg.num_warps * ws_fp8_consumers(cfg)
    return 2 * cfg.num_warps if cfg.family == "tma_ws" else cfg.num_warps


def shared_memory_bytes(cfg: GemmConfig) -> int:
    """Shared memory of the pipelined A and B tiles plus, for TMA stores, the output staging subtile."""
    if is_ws_fp8(cfg) and cfg.out_dtype in DTYPES:
        return ws_fp8_shared_memory_bytes(cfg)
    stage = (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * DTYPES[cfg.dtype].bytes
    staging, tile = 0, cfg.block_m * cfg.block_n
    if cfg.family == "tma_ws" and cfg.subtile:   # its descriptor store stages a block_n // subtile slice
        staging = tile // cfg.subtile * DTYPES[cfg.out_dtype].bytes
    if cfg.family in ("tma_persistent", "streamk") and cfg.split_k == 1 and cfg.out_dtype in DTYPES:
        if cfg.subtile == 0:
            # no staging, but the accumulator's layout conversion before the pointer stores takes scratch (sm_90:
            # 8 KiB for 128x128 over 4 warps, 32 KiB for 128x256 over 8); half the stored tile bounds it
            stored = 4 if cfg.family == "streamk" else DTYPES[cfg.out_dtype].bytes   # streamk: fp32 partials
            staging = tile * stored // 2
        else:
            staging = tile // cfg.subtile * DTYPES[cfg.out_dtype].bytes
            if cfg.family == "streamk":   # its fp32 partial tiles go out in column slices through the same staging
                staging = max(staging, tile * 4 // streamk_ws_slices(cfg))
    barriers = TMA_BARRIER_BYTES if cfg.family in TMA_FAMILIES else 0
    return max(1, cfg.num_stages) * stage + staging + barriers


STREAMK_WS_SLICE_BYTES = 32 * 1024   # at most this much of a streamk partial tile per workspace store


def streamk_ws_slices(cfg: GemmConfig) -> int:
    """Column slices (a power of two, each >= 16 columns) of the fp32 partial tile that a streamk program
    stores through the workspace descriptor."""
    slices = 1
    while cfg.block_m * cfg.block_n * 4 // slices > STREAMK_WS_SLICE_BYTES and cfg.block_n // (2 * slices) >= 16:
        slices *= 2
    return slices


def _family_errors(cfg: GemmConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    if cfg.family not in SPLIT_FAMILIES and cfg.split_k != 1 and not is_ws_fp8(cfg):
        only = " (of tma_ws, only the fp8 form splits K)" if cfg.family == "tma_ws" else ""
        errors.append(("split_k", f"family {cfg.family!r} needs split_k=1{only}, got {cfg.split_k}"))
    if cfg.family == "splitk" or (cfg.family in ("tma_persistent", "tma_ws") and cfg.split_k != 1):
        choice(errors, "split_k", cfg.split_k, SPLIT_K)
    if cfg.family == "tma_persistent" and cfg.split_k > MAX_TMA_SPLIT_K:
        errors.append(("split_k", f"a split tma_persistent kernel sums its partials in one unrolled reduce: split_k "
                                  f"at most {MAX_TMA_SPLIT_K}, got {cfg.split_k}"))
    if cfg.family == "tma_persistent" and cfg.split_k != 1 and cfg.subtile != 1:
        errors.append(("subtile", "a split tma_persistent kernel runs its epilogue where it sums the partials "
                                  f"(pointer stores); subtile must be 1, got {cfg.subtile}"))
    if choice(errors, "subtile", cfg.subtile, SUBTILES) and cfg.subtile != 1:
        if cfg.family not in ("tma_persistent", "streamk"):
            errors.append(("subtile", f"epilogue subtiling is a feature of tma_persistent and streamk; "
                                      f"{cfg.family!r} needs subtile=1"))
        elif cfg.subtile and cfg.block_n // cfg.subtile < 16:
            errors.append(("subtile", f"block_n={cfg.block_n} split in {cfg.subtile} is below 16 columns"))
    if cfg.family not in TMA_FAMILIES:
        return
    if not arch.tma:
        errors.append(("family", f"family {cfg.family!r} needs TMA (sm_90+); {arch.name} has none"))
    if cfg.align != 16:
        errors.append(("align", f"family {cfg.family!r} reads through tensor descriptors, which need 16-byte "
                                f"aligned strides: align must be 16, got {cfg.align}"))
    if cfg.family == "tma_ws" and cfg.num_warps != WS_WARPS:
        errors.append(("num_warps", f"warp specialization takes effect on {arch.name} only with num_warps="
                                    f"{WS_WARPS} (Triton ignores it otherwise); got {cfg.num_warps}"))
    if is_ws_fp8(cfg):
        _ws_fp8_errors(cfg, errors)
        return
    if cfg.family == "tma_ws" and (cfg.with_c or cfg.num_d or cfg.bias == "row"):
        field = "with_c" if cfg.with_c else ("num_d" if cfg.num_d else "bias")
        errors.append((field, "tma_ws epilogues read nothing indexed by output rows (C, D, a row bias): Triton "
                              "3.6's warp-specialized code computed wrong results for them on H200"))
    if cfg.family == "tma_ws" and cfg.num_stages > MAX_WS_STAGES:
        errors.append(("num_stages", f"Triton 3.6's warp-specialized pipeline computed wrong results on H200 with "
                                     f"6 and 8 stages (128x64 and 128x128 tiles, every shape tried); tma_ws needs "
                                     f"num_stages <= {MAX_WS_STAGES}, got {cfg.num_stages}"))
    if cfg.family == "tma_ws" and cfg.block_m < 128 and cfg.block_n > 128:
        errors.append(("block_n", f"Triton 3.6 cannot split a {cfg.block_m}x{cfg.block_n} tile between the two "
                                  f"consumer warp groups of tma_ws (compile fails); use block_n <= 128 or "
                                  f"block_m >= 128"))


# fp8 tma_ws is a Gluon kernel (kernels/gemm_ws_fp8.py): one consumer warp group per 64 rows (two or three) over
# 128-deep K blocks; 128-row tiles promote one block late in chunks of two, 192-row tiles (less register room per
# group) each block once its group completes. Both fit the partitions' registers for these tiles.
WS_FP8_BLOCK_M = (128, 192)
WS_FP8_WIDE_M = (192,)       # not a power of two: legal for this form only (three 64-row warp groups)
WS_FP8_BLOCK_N = (64, 128)
WS_FP8_BLOCK_K = 128
WS_FP8_SMEM_EXTRA = 256
WS_FP8_MAX_SPLIT_K = 8       # split K: the last of a tile's splits sums the slots in an unrolled loop
WS_FP8_GROUP_ROWS = 64       # rows of the tile per consumer warp group


def is_ws_fp8(cfg: GemmConfig) -> bool:
    """Whether cfg is the Gluon form of tma_ws (fp8), whose tiles, warps and shared memory follow its own rules."""
    return cfg.family == "tma_ws" and cfg.dtype in SCALED_DTYPES


def ws_fp8_consumers(cfg: GemmConfig) -> int:
    """Consumer warp groups of the Gluon form: one per WS_FP8_GROUP_ROWS rows of the tile (at least one, so that
    estimates of invalid tiles stay defined)."""
    return max(1, cfg.block_m // WS_FP8_GROUP_ROWS)


def _ws_fp8_errors(cfg: GemmConfig, errors: list[tuple[str, str]]) -> None:
    form = "fp8 tma_ws (the Gluon kernel of 64-row consumer warp groups)"
    if cfg.block_m not in WS_FP8_BLOCK_M:
        errors.append(("block_m", f"{form} needs block_m in {legal(WS_FP8_BLOCK_M)}, got {cfg.block_m}"))
    if cfg.block_m in WS_FP8_WIDE_M and cfg.block_n != 128:
        errors.append(("block_n", f"{form} runs 192-row tiles with block_n=128 only (three warp groups of 64 "
                                  f"rows share the registers), got {cfg.block_n}"))
    if cfg.block_n not in WS_FP8_BLOCK_N:
        errors.append(("block_n", f"{form} needs block_n in {legal(WS_FP8_BLOCK_N)} (wider tiles run out of "
                                  f"registers for the lagged promotion), got {cfg.block_n}"))
    if cfg.block_k != WS_FP8_BLOCK_K:
        errors.append(("block_k", f"{form} needs block_k={WS_FP8_BLOCK_K}, got {cfg.block_k}"))
    if cfg.with_c or cfg.num_d:
        errors.append(("with_c" if cfg.with_c else "num_d", f"{form} reads no C or D tensors; tma_persistent "
                                                             f"and tiled fp8 kernels do"))
    if cfg.split_k > WS_FP8_MAX_SPLIT_K:
        errors.append(("split_k", f"{form} sums a tile's split partials in one unrolled reduce: split_k at most "
                                  f"{WS_FP8_MAX_SPLIT_K}, got {cfg.split_k}"))


def ws_fp8_shared_memory_bytes(cfg: GemmConfig) -> int:
    """fp8 tma_ws: the ring of A and B slots with their two barriers, a 64-row output staging buffer per
    consumer warp group, and WS_FP8_SMEM_EXTRA bytes that Triton 3.6 adds for the partitions (152-168 measured
    on sm_90 builds)."""
    stage = (cfg.block_m + cfg.block_n) * cfg.block_k * DTYPES[cfg.dtype].bytes + 16
    staging = ws_fp8_consumers(cfg) * WS_FP8_GROUP_ROWS * cfg.block_n * DTYPES[cfg.out_dtype].bytes
    return max(1, cfg.num_stages) * stage + staging + WS_FP8_SMEM_EXTRA


def gemm_config_errors(cfg: GemmConfig, arch: ArchSpec) -> list[tuple[str, str]]:
    """Every reason `cfg` cannot be built for `arch`, as (field, reason); empty when valid."""
    errors: list[tuple[str, str]] = []
    if not choice(errors, "family", cfg.family, GEMM_FAMILIES):
        return errors
    choice(errors, "layout", cfg.layout, LAYOUTS)
    _dtype_errors(cfg, arch, errors)
    _tile_errors(cfg, arch, errors)
    choice(errors, "group_m", cfg.group_m, GROUP_M)
    choice(errors, "align", cfg.align, ALIGNS)
    _family_errors(cfg, arch, errors)
    choice(errors, "activation", cfg.activation, ACTIVATIONS)
    choice(errors, "bias", cfg.bias, BIAS_MODES)
    choice(errors, "num_d", cfg.num_d, tuple(range(MAX_D + 1)))
    choice(errors, "with_c", cfg.with_c, (False, True))
    return errors


def is_valid_gemm_config(cfg: GemmConfig, arch: ArchSpec) -> bool:
    return not gemm_config_errors(cfg, arch)


def check_gemm_config(cfg: GemmConfig, arch: ArchSpec) -> GemmConfig:
    """Return cfg, or raise InvalidConfig naming the first offending field."""
    errors = gemm_config_errors(cfg, arch)
    raise_first_error(cfg, errors)
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
    need = max(1, cfg.align // DTYPES[cfg.dtype].bytes)   # elements of the input type in cfg.align bytes
    if problem.align < need:
        how = ("reads through tensor descriptors, which need" if cfg.family in TMA_FAMILIES
               else f"loads {cfg.align}-byte vectors, which need")
        return (f"align: {cfg.family} {how} {cfg.align}-byte aligned pointers, and leading dimensions and sizes "
                f"along unit strides of {cfg.align} bytes (align >= {need} for {cfg.dtype}); the problem "
                f"guarantees align={problem.align}")
    if cfg.family == "tma_ws" and problem.batch > 1:
        return (f"batch: tma_ws computes one matrix (batch={problem.batch}); Triton 3.6 hangs warp-specializing "
                f"the rank-3 descriptors that batches need")
    grid_y = problem.batch * (cfg.split_k if cfg.family == "splitk" else 1)
    if grid_y > MAX_GRID_Y:
        return f"batch: batch*split_k={grid_y} exceeds the grid limit {MAX_GRID_Y}"
    return None


def least_padded(cfg: GemmConfig, problem: GemmProblem) -> GemmProblem | None:
    """The least padded form of `problem` (GemmProblem.padded, smallest align first) that a kernel built from
    cfg computes exactly, or None. An a16 kernel (TMA or vectorized pointer loads) needs 16-byte rows: align 8
    for 2-byte types, 16 for 1-byte ones."""
    for align in (a for a in PROBLEM_ALIGNS if a > problem.align):
        padded = problem.padded(align)
        if gemm_problem_mismatch(cfg, padded) is None:
            return padded
    return None
