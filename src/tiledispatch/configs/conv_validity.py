"""The single validity predicate of the convolution families, and the config-vs-problem match.

Everything that needs to know whether a ConvConfig can exist on an arch (registry, codegen, presets, tests)
calls `conv_config_errors`; everything that needs to know whether a built kernel computes a ConvProblem calls
`conv_problem_mismatch`.
"""
from __future__ import annotations

import math

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import CONV_FAMILIES, KLOOPS, ConvConfig
from tiledispatch.configs.fields import choice, raise_first_error
from tiledispatch.dtypes import DTYPES
from tiledispatch.problems.conv import CONV_ALIGNS, CONV_DTYPES, DIRECTIONS, NDIMS, ConvProblem
from tiledispatch.problems.gemm import ACTIVATIONS

BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
DOT_BLOCKS = (16, 32, 64, 128, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
GROUPS_PER_PROGRAM = (1, 2, 4, 8, 16, 32, 64)
DIAG_GROUP_CHANNELS = (1, 2, 4, 8, 16, 32, 64)   # igemm kloop 'diag': C/G == K/G it is built for (block_k)
DIRECT_UNROLL = (1, 2, 3, 4, 5, 7)   # direct fwd / bwd_data, and roll: innermost filter taps unrolled (block_k)
DIRECT_TAP_CHUNKS = (1, 3, 9)        # direct bwd_weight: filter taps accumulated per program (block_k)
MAX_WGRAD_ACC_PER_THREAD = 96        # direct bwd_weight: tap chunk x tile values per thread (ptxas spills above)
DIRECT_KLOOPS = ("tap", "roll")      # direct: one tile per tap, or depthwise rows rolled (kernels/conv_roll.py)
ROLL_SLOTS = 3                       # kloop 'roll': rolling accumulators (filter heights up to 3)
ROW_TAPS = 3                         # igemm bwd_weight 'diagrow' / 'taprow': taps of a filter row unrolled (widths <= 3)
KLOOP_OWNERS = {"roll": "direct", "im2col": "gemm"}   # kloops of one other family only
ROW_KLOOPS = ("diagrow", "taprow")   # igemm bwd_weight: a filter row of taps per program, an accumulator each
DIAG_KLOOPS = ("diag", "diagrow")    # igemm block-diagonal channel tiles (bwd_weight: rows and columns alike)
ROLL_H_STRIDES = {"fwd": (1, 2), "bwd_data": (1,), "bwd_weight": (1, 2)}   # kloop 'roll': strides along H
SPLIT_K = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_ACC_PER_THREAD = 128     # fp32 accumulators per thread above which ptxas spills
MAX_GRID_YZ = 65535


def _common_errors(cfg: ConvConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    choice(errors, "direction", cfg.direction, DIRECTIONS)
    choice(errors, "ndim", cfg.ndim, NDIMS)
    if choice(errors, "dtype", cfg.dtype, CONV_DTYPES) and not arch.supports_dtype(cfg.dtype):
        errors.append(("dtype", f"dtype={cfg.dtype!r} is not supported on {arch.name}"))
    choice(errors, "out_dtype", cfg.out_dtype, CONV_DTYPES)
    choice(errors, "acc_dtype", cfg.acc_dtype, ("fp32",))
    choice(errors, "num_warps", cfg.num_warps, WARPS)
    choice(errors, "num_stages", cfg.num_stages, STAGES)
    choice(errors, "align", cfg.align, CONV_ALIGNS)
    choice(errors, "kloop", cfg.kloop, KLOOPS)
    choice(errors, "split_k", cfg.split_k, SPLIT_K)
    choice(errors, "activation", cfg.activation, ACTIVATIONS)
    choice(errors, "bias", cfg.bias, (False, True))
    if cfg.direction != "fwd" and (cfg.bias or cfg.activation != "none"):
        errors.append(("bias" if cfg.bias else "activation",
                       f"the fused epilogue exists for direction 'fwd' only, not {cfg.direction!r}"))
    splits_gemm = cfg.family in ("igemm", "tma") or cfg.kloop == "im2col"
    if cfg.direction != "bwd_weight" and not splits_gemm and cfg.split_k not in (0, 1):
        errors.append(("split_k", f"split_k splits the reduction of igemm, tma, im2col and of bwd_weight; family "
                                  f"{cfg.family!r} in direction {cfg.direction!r} needs 0"))


def _align_errors(cfg: ConvConfig, errors: list[tuple[str, str]]) -> None:
    """align 2 and 4 (4- and 8-byte channel vectors) exist for the direct family and the 1x1 GEMM (family
    'gemm', kloop 'tap': the GEMM's rows of 2 or 4 elements, kernels/conv_gemm.gemm_align)."""
    if cfg.align in (2, 4) and cfg.family != "direct" and (cfg.family, cfg.kloop) != ("gemm", "tap"):
        errors.append(("align", f"align {cfg.align} exists for family 'direct' and the 1x1 GEMM (family 'gemm', "
                                f"kloop 'tap') only; family {cfg.family!r} kloop {cfg.kloop!r} takes 1 or 8"))


def _igemm_errors(cfg: ConvConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    if cfg.kloop in KLOOP_OWNERS:
        errors.append(("kloop", f"kloop {cfg.kloop!r} belongs to family {KLOOP_OWNERS[cfg.kloop]!r}; igemm walks "
                                "'tap', 'flat', 'diag', 'diagrow' or 'taprow'"))
    if cfg.kloop in ROW_KLOOPS and cfg.direction != "bwd_weight":
        errors.append(("kloop", f"kloop {cfg.kloop!r} exists for direction 'bwd_weight' only, not {cfg.direction!r}"))
    if cfg.kloop == "taprow" and cfg.groups_per_program != 1:
        errors.append(("groups_per_program", f"kloop 'taprow' takes one group per program; groups_per_program must "
                                             f"be 1, got {cfg.groups_per_program}"))
    ok = choice(errors, "block_m", cfg.block_m, DOT_BLOCKS) & choice(errors, "block_n", cfg.block_n, DOT_BLOCKS)
    if cfg.kloop != "diag" or cfg.direction == "bwd_weight":   # fwd / bwd_data diag: block_k = C/G (below)
        ok &= choice(errors, "block_k", cfg.block_k, DOT_BLOCKS)
    ok &= choice(errors, "groups_per_program", cfg.groups_per_program, GROUPS_PER_PROGRAM)
    if not ok or cfg.num_warps not in WARPS or cfg.dtype not in DTYPES:
        return
    tiles = cfg.groups_per_program * (ROW_TAPS if cfg.kloop in ROW_KLOOPS else 1)   # accumulator tiles
    acc = tiles * cfg.block_m * cfg.block_n // (32 * cfg.num_warps)
    if acc > MAX_ACC_PER_THREAD:
        errors.append(("num_warps", f"{tiles} x {cfg.block_m}x{cfg.block_n} tile with "
                                    f"{cfg.num_warps} warps holds {acc} accumulators per thread "
                                    f"(max {MAX_ACC_PER_THREAD})"))
    smem = shared_memory_bytes(cfg)
    if smem > arch.smem_per_block:
        errors.append(("num_stages", f"{cfg.num_stages} stages of {cfg.name} need {smem} B of shared memory; "
                                     f"{arch.name} has {arch.smem_per_block} B per block"))
    if cfg.kloop in DIAG_KLOOPS:
        _igemm_diag_errors(cfg, errors)
    if cfg.direction == "bwd_weight":
        _igemm_wgrad_errors(cfg, arch, errors)


def _igemm_diag_errors(cfg: ConvConfig, errors: list[tuple[str, str]]) -> None:
    """kloop 'diag': fwd / bwd_data (kernels/conv_igemm.py) do one block-diagonal dot per tap over the channel
    tile itself (block_k = C/G); bwd_weight 'diag' and 'diagrow' (kernels/conv_wgrad.py) tile the same channels
    as rows and columns (block_m == block_n) and reduce over pixels (block_k)."""
    if cfg.direction == "bwd_weight":
        if cfg.block_m != cfg.block_n:
            errors.append(("block_m", f"bwd_weight kloop {cfg.kloop!r} uses one channel tile for rows and columns: "
                                      f"block_m must equal block_n={cfg.block_n}, got {cfg.block_m}"))
    elif cfg.block_k not in DIAG_GROUP_CHANNELS or cfg.block_n % cfg.block_k:
        errors.append(("block_k", f"kloop 'diag' takes block_k = channels per group, one of {DIAG_GROUP_CHANNELS} "
                                  f"dividing block_n={cfg.block_n}; got {cfg.block_k}"))
    if cfg.groups_per_program != 1:
        errors.append(("groups_per_program", f"kloop {cfg.kloop!r} tiles the channels of all groups at once; "
                                             f"groups_per_program must be 1, got {cfg.groups_per_program}"))


# ---- igemm bwd_weight conditions (kernels/conv_wgrad.py) live here ----------------------------------------
def _igemm_wgrad_errors(cfg: ConvConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    """igemm bwd_weight (kernels/conv_wgrad.py). Both kloops and every groups_per_program compile (a batched
    3-D dot when > 1); 16 warps leave 128 registers per thread, so at most 64 of them may hold accumulators."""
    acc = cfg.groups_per_program * cfg.block_m * cfg.block_n // (32 * cfg.num_warps)
    if cfg.num_warps == 16 and acc > 64:
        errors.append(("num_warps", f"{cfg.groups_per_program} x {cfg.block_m}x{cfg.block_n} tile with 16 warps "
                                    f"holds {acc} accumulators per thread in a 128-register budget (max 64)"))


def _direct_errors(cfg: ConvConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    choice(errors, "block_m", cfg.block_m, BLOCKS)
    choice(errors, "block_n", cfg.block_n, BLOCKS)
    per_thread = cfg.block_m * cfg.block_n // (32 * max(cfg.num_warps, 1))
    if cfg.direction == "bwd_weight" and cfg.kloop != "roll":
        if cfg.block_k not in DIRECT_TAP_CHUNKS:
            errors.append(("block_k", f"family 'direct' bwd_weight takes block_k = filter taps accumulated per "
                                      f"program, one of {DIRECT_TAP_CHUNKS}; got {cfg.block_k}"))
        elif cfg.block_k * per_thread > MAX_WGRAD_ACC_PER_THREAD:
            errors.append(("block_k", f"{cfg.block_k} taps x a {cfg.block_m}x{cfg.block_n} tile with "
                                      f"{cfg.num_warps} warps hold {cfg.block_k * per_thread} accumulators per "
                                      f"thread (max {MAX_WGRAD_ACC_PER_THREAD})"))
    elif cfg.block_k not in DIRECT_UNROLL:
        errors.append(("block_k", f"family 'direct' takes block_k = taps of the innermost filter dim unrolled "
                                  f"(1: none), one of {DIRECT_UNROLL}; got {cfg.block_k}"))
    if cfg.groups_per_program != 1:
        errors.append(("groups_per_program", "family 'direct' vectorizes over channels; groups_per_program "
                                             f"must be 1, got {cfg.groups_per_program}"))
    if cfg.kloop not in DIRECT_KLOOPS:
        errors.append(("kloop", f"family 'direct' takes kloop 'tap' or 'roll', got {cfg.kloop!r}"))
    elif cfg.kloop == "roll":
        _roll_errors(cfg, per_thread, errors)
    if per_thread > MAX_ACC_PER_THREAD:
        errors.append(("num_warps", f"a {cfg.block_m}x{cfg.block_n} tile with {cfg.num_warps} warps holds more "
                                    f"than {MAX_ACC_PER_THREAD} accumulators per thread"))
    smem = direct_shared_memory_bytes(cfg)
    if smem > arch.smem_per_block:
        errors.append(("num_stages", f"{cfg.num_stages} pipelined stages of {cfg.name} need up to {smem} B of "
                                     f"shared memory; {arch.name} has {arch.smem_per_block} B per block"))


def direct_shared_memory_bytes(cfg: ConvConfig) -> int:
    """Family direct: shared memory of the pipelined loads (kernels/conv_common.loop_range), an upper estimate:
    num_stages - 1 buffers of the [block_m, block_n] tiles one loop trip loads: a tap loop one per unrolled
    filter column (block_k; bwd_weight: one per tap of its chunk and its dy tile), a roll walk at stride 2 two
    source rows per filter column (bwd_weight: and its dy tile)."""
    tile = cfg.block_m * cfg.block_n * DTYPES[cfg.dtype].bytes if cfg.dtype in DTYPES else 0
    loads = cfg.block_k * (2 if cfg.kloop == "roll" else 1) + (cfg.direction == "bwd_weight")
    return max(0, cfg.num_stages - 1) * loads * tile


def _roll_errors(cfg: ConvConfig, per_thread: int, errors: list[tuple[str, str]]) -> None:
    """kloop 'roll' (kernels/conv_roll.py): depthwise, 2-D and 3-D (it rolls down H, inside W); block_k
    filter columns unrolled in every direction (checked with the tap loop's unroll); ROLL_SLOTS accumulator
    tiles (bwd_weight: one per filter row and column), the split given by its row strips."""
    if cfg.ndim not in (2, 3):
        errors.append(("ndim", f"kloop 'roll' rolls down the rows of 2-D and 3-D images, not ndim={cfg.ndim}"))
    tiles = ROLL_SLOTS * (cfg.block_k if cfg.direction == "bwd_weight" else 1)
    if tiles * per_thread > MAX_WGRAD_ACC_PER_THREAD:
        errors.append(("num_warps", f"kloop 'roll' keeps {tiles} {cfg.block_m}x{cfg.block_n} accumulator tiles: "
                                    f"{tiles * per_thread} values per thread with {cfg.num_warps} warps "
                                    f"(max {MAX_WGRAD_ACC_PER_THREAD})"))
    if cfg.direction == "bwd_weight" and cfg.split_k not in (0, 1):
        errors.append(("split_k", f"kloop 'roll' splits bwd_weight by its row strips; split_k must be 0, got "
                                  f"{cfg.split_k}"))


def shared_memory_bytes(cfg: ConvConfig) -> int:
    """Shared memory of the pipelined operand tiles of an implicit-GEMM instance (estimate)."""
    g = cfg.groups_per_program
    # fwd / bwd_data diag reduce over the channel tile
    red = cfg.block_n if cfg.kloop == "diag" and cfg.direction != "bwd_weight" else cfg.block_k
    x_tiles = ROW_TAPS if cfg.kloop in ROW_KLOOPS else 1   # an x tile per unrolled tap of a filter row
    stage = g * (cfg.block_m * red + x_tiles * red * cfg.block_n) * DTYPES[cfg.dtype].bytes
    return max(1, cfg.num_stages) * stage


def _gemm_errors(cfg: ConvConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    """1x1 as GEMM: the GEMM instance it runs must be valid; split_k picks it (kernels/conv_gemm.gemm_config):
    fwd / bwd_data 0 (tma_persistent when aligned, else tiled) or, aligned, 1 (tiled); bwd_weight 1 (tiled) or
    the split-K GEMM family, whose split count (split_k >= 2) is fixed at build time. kloop 'im2col':
    _im2col_errors."""
    from tiledispatch.configs.validity import SPLIT_K as GEMM_SPLIT_K
    from tiledispatch.configs.validity import gemm_config_errors
    from tiledispatch.kernels.conv_gemm import gemm_config

    if cfg.kloop == "im2col":
        _im2col_errors(cfg, arch, errors)
        return
    wants = [("groups_per_program", cfg.groups_per_program, 1), ("kloop", cfg.kloop, "tap")]
    if cfg.direction != "bwd_weight":
        if cfg.split_k not in ((0, 1) if cfg.align == 8 else (0,)):
            errors.append(("split_k", f"family 'gemm' {cfg.direction} runs one GEMM: split_k 0 (tma_persistent "
                                      f"when aligned) or, at align 8, 1 (the tiled GEMM); got {cfg.split_k} at "
                                      f"align {cfg.align}"))
    elif cfg.split_k not in (1, *GEMM_SPLIT_K):
        errors.append(("split_k", f"family 'gemm' bwd_weight splits the pixel reduction over a fixed number of "
                                  f"programs, one of {(1, *GEMM_SPLIT_K)} (1: unsplit); got {cfg.split_k}"))
        return
    for field, value, want in wants:
        if value != want:
            errors.append((field, f"family 'gemm' needs {field}={want!r}, got {value!r}"))
    if cfg.dtype in DTYPES and cfg.out_dtype in DTYPES:
        errors.extend((field, f"as GEMM: {reason}") for field, reason in gemm_config_errors(gemm_config(cfg), arch))


def _im2col_errors(cfg: ConvConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    """Family 'gemm', kloop 'im2col' (kernels/conv_im2col.py): a bf16 / fp16 forward or weight gradient through
    an im2col workspace and the tma_persistent GEMM, whose instance (split_k: its fixed split count, 1 forward)
    must be valid."""
    from tiledispatch.configs.validity import SPLIT_K as GEMM_SPLIT_K
    from tiledispatch.configs.validity import gemm_config_errors
    from tiledispatch.kernels.conv_im2col import DIRECTIONS, gemm_config

    if cfg.direction not in DIRECTIONS:
        errors.append(("direction", f"kloop 'im2col' computes {', '.join(DIRECTIONS)}, not {cfg.direction!r}"))
    if cfg.dtype not in ("bf16", "fp16"):
        errors.append(("dtype", f"kloop 'im2col' runs a 16-bit GEMM; dtype {cfg.dtype!r} is not one"))
    if cfg.groups_per_program != 1:
        errors.append(("groups_per_program", f"kloop 'im2col' needs groups_per_program=1, got "
                                             f"{cfg.groups_per_program}"))
    if cfg.align not in (1, 8):
        errors.append(("align", f"kloop 'im2col' takes align 8 (channel totals multiples of 16) or 1 (any input "
                                f"channel count, in workspace rows padded to 16 bytes); got {cfg.align}"))
    elif cfg.align == 1 and cfg.direction == "bwd_weight" and cfg.split_k < 2:
        errors.append(("split_k", "kloop 'im2col' bwd_weight at align 1 writes dw (rows of taps x C elements, not "
                                  f"16-byte aligned) through its split epilogue: split_k must be >= 2, got {cfg.split_k}"))
    splits = tuple(s for s in (1, *GEMM_SPLIT_K) if s in SPLIT_K)
    if cfg.split_k not in splits:
        errors.append(("split_k", f"kloop 'im2col' splits the GEMM's reduction a fixed number of times (the split "
                                  f"reduce runs the epilogue), one of {splits}; got {cfg.split_k}"))
    if not errors and cfg.dtype in DTYPES and cfg.out_dtype in DTYPES:
        errors.extend((field, f"as GEMM: {reason}") for field, reason in gemm_config_errors(gemm_config(cfg), arch))


def _tma_errors(cfg: ConvConfig, arch: ArchSpec, errors: list[tuple[str, str]]) -> None:
    """Family 'tma': 2-D dots of one group over tensor-copy boxes; fwd / bwd_data walk the taps (kloop 'tap',
    block_m pixels per box: kernels/conv_tma.py), bwd_weight a filter row per program (kloop 'taprow', block_k
    pixels per box: kernels/conv_tma_wgrad.py)."""
    from tiledispatch.kernels.conv_tma import box_unit

    if cfg.dtype not in ("bf16", "fp16"):
        errors.append(("dtype", f"family 'tma' runs 16-bit tensor-core dots; dtype {cfg.dtype!r} is not one"))
    wgrad = cfg.direction == "bwd_weight"
    for field, value, want in (("groups_per_program", cfg.groups_per_program, 1),
                               ("kloop", cfg.kloop, "taprow" if wgrad else "tap"), ("align", cfg.align, 8)):
        if value != want:
            errors.append((field, f"family 'tma' {cfg.direction} needs {field}={want!r}, got {value!r}"))
    if cfg.split_k == 1 and not wgrad:
        errors.append(("split_k", f"family 'tma' {cfg.direction} takes split_k 0 (one range) or >= 2 (at most that "
                                  "many reduction ranges), not 1"))
    box, field = box_unit(cfg.ndim), "block_k" if wgrad else "block_m"   # the pixels of one box
    pixels = getattr(cfg, field)
    if pixels % box or pixels < box:
        errors.append((field, f"family 'tma' tiles {cfg.ndim}-D pixels in boxes of {box}-pixel rows; {field} "
                              f"must be a multiple of {box}, got {pixels}"))
    _igemm_errors(cfg, arch, errors)


_FAMILY_ERRORS = {"igemm": _igemm_errors, "direct": _direct_errors, "gemm": _gemm_errors, "tma": _tma_errors}


def conv_config_errors(cfg: ConvConfig, arch: ArchSpec) -> list[tuple[str, str]]:
    """Every reason `cfg` cannot be built for `arch`, as (field, reason); empty when valid."""
    errors: list[tuple[str, str]] = []
    if not choice(errors, "family", cfg.family, CONV_FAMILIES):
        return errors
    _common_errors(cfg, arch, errors)
    _align_errors(cfg, errors)
    _FAMILY_ERRORS[cfg.family](cfg, arch, errors)
    return errors


def check_conv_config(cfg: ConvConfig, arch: ArchSpec) -> ConvConfig:
    """Return cfg, or raise InvalidConfig naming the first offending field."""
    errors = conv_config_errors(cfg, arch)
    raise_first_error(cfg, errors)
    return cfg


def conv_problem_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """None when a kernel built from cfg computes `problem` exactly; otherwise the reason it cannot."""
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
    return _FAMILY_MISMATCH[cfg.family](cfg, problem)


def _igemm_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    if problem.direction == "bwd_weight":
        return _igemm_wgrad_mismatch(cfg, problem)
    return _igemm_fwd_dgrad_mismatch(cfg, problem)


INT32_LIMIT = 2**31 - 1


def _align8_group_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Align-8 igemm kernels (not 'diag') read 16-byte channel runs inside each group."""
    if cfg.align == 8 and (problem.c_per_group % 8 or problem.k_per_group % 8):
        return (f"align: align-8 igemm kernels need channels per group that are multiples of 8 (16-byte channel "
                f"runs); the problem has C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    return None


def _phases_mismatch(problem: ConvProblem) -> str | None:
    """bwd_data grids of igemm and direct have a layer per stride phase, on a grid axis of at most MAX_GRID_YZ."""
    phases = math.prod(problem.stride) if problem.direction == "bwd_data" else 1
    if phases > MAX_GRID_YZ:
        return f"stride: {phases} stride phases exceed the grid limit {MAX_GRID_YZ}"
    return None


def _igemm_fwd_dgrad_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """igemm fwd / bwd_data (kernels/conv_igemm.py): row indices are int32, phases sit on grid axis 1."""
    from tiledispatch.kernels.conv_common import phase_rows
    from tiledispatch.kernels.conv_igemm import grid

    if cfg.groups_per_program > problem.groups:
        return (f"groups_per_program: the kernel merges {cfg.groups_per_program} groups per program, the problem "
                f"has {problem.groups}")
    if cfg.kloop == "diag":
        if problem.c_per_group != cfg.block_k or problem.k_per_group != cfg.block_k:
            return (f"c_per_group: kloop 'diag' with block_k={cfg.block_k} computes C/G == K/G == {cfg.block_k}; "
                    f"the problem has C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    elif reason := _align8_group_mismatch(cfg, problem):
        return reason
    rows = phase_rows(problem)
    programs = grid(cfg, problem)[0]
    if rows + cfg.block_m > INT32_LIMIT or programs > INT32_LIMIT:
        return f"spatial: {rows} GEMM rows in {programs} programs exceed the kernel's int32 row indexing"
    return _phases_mismatch(problem)


# ---- igemm bwd_weight conditions (kernels/conv_wgrad.py) live here ----------------------------------------
def _igemm_wgrad_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """igemm bwd_weight (kernels/conv_wgrad.py): channel runs as the alignment promises, then the grid."""
    if cfg.kloop in DIAG_KLOOPS:
        reason = _wgrad_diag_mismatch(cfg, problem)
    else:
        reason = _align8_group_mismatch(cfg, problem)
    return reason or _row_mismatch(cfg, problem) or _wgrad_grid_mismatch(cfg, problem)


def _row_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    if cfg.kloop in ROW_KLOOPS and problem.filter[-1] > ROW_TAPS:
        return (f"filter: kloop {cfg.kloop!r} unrolls {ROW_TAPS} taps of the innermost filter dim; the problem's "
                f"filter is {problem.filter}")
    return None


def _wgrad_diag_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    cg = problem.c_per_group
    if cg != problem.k_per_group or cg > cfg.block_n:
        return (f"c_per_group: bwd_weight kloop {cfg.kloop!r} needs C/G == K/G <= block_n={cfg.block_n}; the "
                f"problem has C/G={cg}, K/G={problem.k_per_group}")
    if cfg.align == 8 and (cfg.block_n // cg) * cg % 8:
        return (f"align: align-8 'diag' tiles of {cfg.block_n // cg} groups of C/G={cg} channels do not start on "
                f"multiples of 8 channels")
    return None


def _wgrad_grid_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Pixel indices are int32, splits and group blocks sit on grid axes 1 and 2."""
    from tiledispatch.kernels.conv_wgrad import pixel_chunks, tile_counts

    if (pixel_chunks(cfg, problem) + 1) * cfg.block_k > INT32_LIMIT:
        return f"spatial: {problem.n} x {problem.output} output pixels exceed the kernel's int32 pixel indexing"
    tiles_m, tiles_n, group_blocks = tile_counts(cfg, problem)
    if group_blocks > MAX_GRID_YZ:
        return (f"groups: {group_blocks} blocks of {cfg.groups_per_program} groups exceed the grid limit "
                f"{MAX_GRID_YZ}; use a larger groups_per_program")
    if tiles_m * tiles_n > INT32_LIMIT or math.prod(problem.filter) * problem.c_per_group > INT32_LIMIT:
        return f"filter: {problem.filter} taps x {problem.c_per_group} channels exceed the kernel's int32 columns"
    return None


DIRECT_MAX_CG = 16          # input channels per group the direct family loops over (beyond: igemm's domain)
DIRECT_MAX_INDEX = 2 ** 30  # the direct kernels index pixels and weight elements in int32


def _volume(sizes: tuple[int, ...]) -> int:
    out = 1
    for size in sizes:
        out *= size
    return out


def _roll_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """kloop 'roll': depthwise, filter rows up to ROLL_SLOTS walked with dilation 1 and a stride of
    ROLL_H_STRIDES along H (bwd_data: stride 1 in every dim), the filter width within the unroll."""
    if problem.c_per_group != 1 or problem.k_per_group != 1:
        return (f"c_per_group: kloop 'roll' computes depthwise convolutions (C/G = K/G = 1); the problem has "
                f"C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    if problem.filter[-2] > ROLL_SLOTS:
        return f"filter: kloop 'roll' rolls filters up to {ROLL_SLOTS} rows high; the problem's is {problem.filter}"
    if problem.filter[-1] > cfg.block_k:
        return (f"filter: the kernel unrolls {cfg.block_k} filter columns; the problem's filter {problem.filter} "
                f"is wider")
    if problem.dilation[-2] != 1:
        return f"dilation: kloop 'roll' needs dilation 1 along H, got {problem.dilation}"
    if problem.direction == "bwd_data" and any(s != 1 for s in problem.stride):
        return f"stride: kloop 'roll' computes bwd_data of stride 1 in every dim, got {problem.stride}"
    if problem.stride[-2] not in ROLL_H_STRIDES[problem.direction]:
        strides = " or ".join(map(str, ROLL_H_STRIDES[problem.direction]))
        return f"stride: kloop 'roll' rolls down H with stride {strides}, got {problem.stride}"
    return None


def _direct_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    if cfg.kloop == "roll" and (reason := _roll_mismatch(cfg, problem)):
        return reason
    if cfg.direction != "bwd_weight" and cfg.block_k > 1 and problem.filter[-1] > cfg.block_k:
        return (f"filter: the kernel unrolls {cfg.block_k} taps of the innermost filter dim; the problem's filter "
                f"{problem.filter} is wider")
    if problem.c_per_group > DIRECT_MAX_CG:
        return (f"c_per_group: family 'direct' loops over at most {DIRECT_MAX_CG} input channels per group "
                f"(CUDA-core FMAs); the problem has {problem.c_per_group}")
    pixels = problem.n * max(_volume(problem.spatial), _volume(problem.output))
    weights = problem.k * problem.c_per_group * _volume(problem.filter)
    for field, count in (("spatial", pixels), ("k", weights)):
        if count >= DIRECT_MAX_INDEX:
            what = "N x pixels" if field == "spatial" else "weight elements"
            return f"{field}: family 'direct' indexes {what} in int32 (< {DIRECT_MAX_INDEX}); the problem has {count}"
    channels = problem.c if problem.direction == "bwd_data" else problem.k
    if -(-channels // cfg.block_n) > MAX_GRID_YZ:
        return f"block_n: {channels} channels need more than {MAX_GRID_YZ} channel tiles of {cfg.block_n}"
    return _phases_mismatch(problem)


def _gemm_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    if cfg.kloop == "im2col":
        return _im2col_mismatch(cfg, problem)
    if any(f != 1 for f in problem.filter):
        return f"filter: family 'gemm' computes 1x1 convolutions, not filter {problem.filter}"
    if any(s != 1 for s in problem.stride):
        return f"stride: family 'gemm' needs stride 1, got {problem.stride}"
    if any(p != (0, 0) for p in problem.padding):
        return f"padding: family 'gemm' needs no padding, got {problem.padding}"
    if problem.groups != 1:
        return f"groups: family 'gemm' computes one group, got groups={problem.groups}"
    if problem.direction == "bwd_weight" and cfg.align == 8 and (problem.c % 16 or problem.k % 16):
        return (f"c: family 'gemm' bwd_weight at align 8 runs a GEMM compiled for channel totals that are "
                f"multiples of 16; the problem has C={problem.c}, K={problem.k}")
    return None


def _im2col_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """kloop 'im2col': one group, align 8 channel totals multiples of 16 (align 1: output channels multiples of 8,
    a filter that needs the copy), a workspace within IM2COL_MAX_ELEMENTS, pixel counts (dx's too) within
    int32."""
    from tiledispatch.kernels.conv_im2col import (
        IM2COL_MAX_ELEMENTS,
        pixels,
        reads_x,
        sizes,
        workspace_elements,
    )

    if problem.groups != 1:
        return f"groups: kloop 'im2col' computes one group, got groups={problem.groups}"
    if problem.n * _volume(problem.spatial) > INT32_LIMIT:
        return f"spatial: N x input pixels ({problem.n * _volume(problem.spatial)}) exceed the int32 pixel index"
    if cfg.align == 8 and (problem.c % 16 or problem.k % 16):
        return (f"c: kloop 'im2col' copies 16-byte channel runs and runs a GEMM over rows of multiples of 16 "
                f"elements; the problem has C={problem.c}, K={problem.k}")
    if problem.k % 8:
        return (f"k: kloop 'im2col' runs a tensor-copy GEMM over the output channels as 16-byte rows; K must be a "
                f"multiple of 8, got {problem.k}")
    image = _volume(problem.spatial) * problem.c
    if cfg.align != 8 and image > INT32_LIMIT:
        return (f"spatial: kloop 'im2col' at align 1 offsets within one image in int32; an image of "
                f"{problem.spatial} x {problem.c} channels has {image} elements")
    if cfg.align != 8 and reads_x(problem):
        return ("filter: a 1x1 convolution at stride 1 without padding needs no im2col; kloop 'im2col' runs it at "
                "align 8 only (its GEMM reads or writes x's pixel rows)")
    workspace = workspace_elements(problem, cfg)
    if workspace > IM2COL_MAX_ELEMENTS:
        return f"spatial: the im2col workspace would hold {workspace} elements, more than {IM2COL_MAX_ELEMENTS}"
    m, n, _ = sizes(problem, cfg)
    if cfg.split_k > 1 and cfg.split_k * m * n > IM2COL_MAX_ELEMENTS:
        return (f"split_k: {cfg.split_k} fp32 partials of the {m} x {n} GEMM output would hold "
                f"{cfg.split_k * m * n} elements, more than {IM2COL_MAX_ELEMENTS}")
    if pixels(problem) > INT32_LIMIT:
        return (f"spatial: N x output pixels ({pixels(problem)}) exceed the int32 pixel index of the im2col copy "
                "and GEMM")
    return None


def _tma_mismatch(cfg: ConvConfig, problem: ConvProblem) -> str | None:
    """Family 'tma': stride 1, 16-byte channel runs per group, whole reduction chunks for grouped bwd_data;
    bwd_weight: filter rows of at most ROW_TAPS taps, boxes on grid axis 1."""
    from tiledispatch.kernels.conv_tma import tiles
    from tiledispatch.kernels.conv_tma_wgrad import boxes

    if any(s != 1 for s in problem.stride):
        return f"stride: family 'tma' shifts whole pixel boxes per tap and needs stride 1, got {problem.stride}"
    if problem.c_per_group % 8 or problem.k_per_group % 8:
        return (f"c_per_group: family 'tma' reads 16-byte channel runs per group; the problem has "
                f"C/G={problem.c_per_group}, K/G={problem.k_per_group}")
    if problem.direction == "bwd_data" and problem.groups > 1 and problem.k_per_group % cfg.block_k:
        return (f"k_per_group: grouped bwd_data on family 'tma' reduces whole chunks of block_k={cfg.block_k} "
                f"output channels per group; the problem has K/G={problem.k_per_group}")
    if problem.direction == "bwd_weight":
        if reason := _row_mismatch(cfg, problem):
            return reason
        if problem.groups > MAX_GRID_YZ:
            return f"groups: family 'tma' bwd_weight puts the {problem.groups} groups on a grid axis of {MAX_GRID_YZ}"
        count = boxes(cfg, problem)
    else:
        count = tiles(cfg, problem)
    if count > INT32_LIMIT or max(problem.spatial + problem.output) + 2 * max(
            max(p) for p in problem.padding) >= INT32_LIMIT:
        return f"spatial: {problem.n} x {problem.spatial} pixels exceed the kernel's int32 grid and coordinates"
    return None


_FAMILY_MISMATCH = {"igemm": _igemm_mismatch, "direct": _direct_mismatch, "gemm": _gemm_mismatch,
                    "tma": _tma_mismatch}
