"""The versioned feature spec of the cost model: numbers computed from a (problem, config) pair's `p_` / `c_`
columns (the dataset schema of tiledispatch.bench.schema), never from kernel names.

`feature_frame(df, arch)` computes them on dataset rows; `features_for(problem, configs, arch)` builds the
same rows at run time through the sweep's own row builders (schema.problem_columns / config_columns) and the
same code. Every feature is a float; one-hot columns stand for the categorical fields (family, k-loop). Bump
an op's FEATURE_SPEC_VERSIONS entry whenever one of its names, their meaning or order changes: models trained
on another version are refused.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Sequence
from typing import Any

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.bench import schema
from tiledispatch.configs.conv import CONV_FAMILIES, ConvConfig
from tiledispatch.configs.gemm import GEMM_FAMILIES, TMA_FAMILIES, GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.ml.objects import (
    CONV_PROBLEM_FIELDS,
    GEMM_PROBLEM_FIELDS,
    OBJECT_FEATURES,
    object_features,
    objects_from_columns,
)
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem

# 2: kloop_diag, the block-diagonal tiled view, direct unroll; 3: conv family tma; 4: conv kloop_roll,
# kloop_halo, kloop_im2col and gemm_tiled (every kernel kind a conv model knows is told apart by a feature);
# conv 5: kloop_halofh; conv 6: family tma's tiles are its pixel boxes (tiles_m of fwd / bwd_data, k_iters of
# bwd_weight), not flat pixel rows. Per op: a conv feature leaves the GEMM models' spec as it was
FEATURE_SPEC_VERSIONS = {"gemm": 4, "conv": 6}
OPS = ("gemm", "conv")
MAX_OCCUPANCY = 16
ARCH_FEATURES = ("sm_count", "smem_per_sm_kb", "peak_tflops", "hbm_gbps")
# what every op shares: the tiled view (rows x cols x reduction steps of a program), waves, the rules estimate
TILE_FEATURES = ("block_m", "block_n", "block_k", "warps", "stages", "c_align", "acc_per_thread", "smem_kb",
                 "occupancy", "tiles_m", "tiles_n", "log_tiles", "waste_m", "waste_n", "tile_fill", "k_iters",
                 "log_k_iters", "waves", "last_wave_idle", "log_critical_steps", "log_flops", "log_bytes",
                 "intensity", "roofline_log_us", *OBJECT_FEATURES, "rules_rel", "log_programs")
GEMM_FEATURES = ("m", "n", "k", "batch", "log_m", "log_n", "log_k", "p_align", "padded", "group_m", "split_k",
                 "subtile", "waste_k", "traffic_ratio", "tiles_per_program",
                 *(f"fam_{f}" for f in GEMM_FAMILIES), *TILE_FEATURES, *ARCH_FEATURES)
CONV_FEATURES = ("n", "c", "k", "groups", "c_per_group", "k_per_group", "ndim", "taps", "filter_max",
                 "stride_prod", "dilation_max", "pad_sum", "log_in_px", "log_out_px", "depthwise", "gemm_m",
                 "gemm_n", "gemm_k", "log_gemm_m", "log_gemm_n", "log_gemm_k", "p_align",
                 "groups_per_program", "group_blocks", "waste_g", "kloop_flat", "kloop_diag", "kloop_roll",
                 "kloop_halo", "kloop_halofh", "kloop_im2col", "gemm_tiled", "unroll",
                 *(f"fam_{f}" for f in CONV_FAMILIES), *TILE_FEATURES, *ARCH_FEATURES)
NAMES = {"gemm": GEMM_FEATURES, "conv": CONV_FEATURES}
PROBLEM_FIELDS = {"gemm": GEMM_PROBLEM_FIELDS, "conv": CONV_PROBLEM_FIELDS}
CONFIG_FIELDS = {"gemm": tuple(f.name for f in dataclasses.fields(GemmConfig)),
                 "conv": tuple(f.name for f in dataclasses.fields(ConvConfig))}


def feature_names(op: str) -> tuple[str, ...]:
    if op not in NAMES:
        raise bad_choice(BadInput, "op", op, OPS)
    return NAMES[op]


def spec_version(op: str) -> int:
    """This tiledispatch's feature spec version of `op`."""
    if op not in FEATURE_SPEC_VERSIONS:
        raise bad_choice(BadInput, "op", op, OPS)
    return FEATURE_SPEC_VERSIONS[op]


def spec_dict(op: str) -> dict[str, Any]:
    """The feature spec a model stores in its metadata (and is checked against when loaded)."""
    return {"version": spec_version(op), "op": op, "names": list(feature_names(op))}


# -- public API ---------------------------------------------------------------------------------------------
def feature_frame(df, arch: ArchSpec):
    """The features of every row of a dataset frame (kernel rows; index kept), columns in spec order."""
    import numpy as np
    import pandas as pd

    op = _op_of(df)
    cols = {c: df[c].to_numpy() for c in df.columns if c.startswith(("p_", "c_"))}
    needed = [f"c_{f}" for f in CONFIG_FIELDS[op]] + [f"p_{f}" for f in PROBLEM_FIELDS[op]]
    needed += ["p_flops", "p_min_bytes"]
    if op == "conv":
        needed += [f"p_out_{i}" for i in range(schema.MAX_DIMS)] + ["p_c_per_group", "p_k_per_group"]
    for column in needed:
        if column not in cols:
            raise BadInput(f"the rows lack the column {column} (schema of tiledispatch.bench.schema)",
                           field=column)
    problems, configs = objects_from_columns(op, cols, CONFIG_FIELDS[op])
    matrix = _matrix(op, cols, len(df), problems, configs, arch)
    return pd.DataFrame(matrix, columns=list(NAMES[op]), index=df.index, dtype=np.float64)


def features_for(problem: GemmProblem | ConvProblem, configs: Sequence[GemmConfig | ConvConfig],
                 arch: ArchSpec):
    """The features of `problem` with each of `configs` (run-time ranking), as feature_frame computes them."""
    import pandas as pd

    op = schema.op_of(problem)
    return pd.DataFrame(feature_matrix(problem, configs, arch), columns=list(NAMES[op]))


def feature_matrix(problem: GemmProblem | ConvProblem, configs: Sequence[GemmConfig | ConvConfig],
                   arch: ArchSpec):
    """features_for as a float64 numpy array (rows: configs, columns: spec order): the scoring fast path."""
    import numpy as np

    op = schema.op_of(problem)
    if not configs:
        return np.zeros((0, len(NAMES[op])))
    for cfg in configs:
        if cfg.op != op:
            raise BadInput(f"config {cfg.name} is a {cfg.op} kernel; the problem is a {op} problem",
                           field="op")
    n = len(configs)
    cols: dict[str, Any] = {name: np.full(n, value, dtype=object if isinstance(value, str) else None)
                            for name, value in schema.problem_columns(problem).items()}
    names, _ = _config_row(configs[0])
    for name, values in zip(names, zip(*(_config_row(cfg)[1] for cfg in configs))):
        cols[name] = np.array(values, dtype=object if isinstance(values[0], str) else None)
    return _matrix(op, cols, n, [problem] * n, list(configs), arch)


@functools.lru_cache(maxsize=8192)
def _config_row(cfg: GemmConfig | ConvConfig) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """schema.config_columns of cfg as (names, values), once per config."""
    row = schema.config_columns(cfg)
    return tuple(row), tuple(row.values())


def _op_of(df) -> str:
    vendor = df["family"] == schema.VENDOR_FAMILY if "family" in df.columns else False
    if "c_family" in df.columns and (df["c_family"].isna() | vendor).any():
        raise BadInput("vendor rows have no kernel config: pass kernel rows only (family != 'vendor')",
                       field="family")
    if "op" in df.columns:
        ops = set(df["op"].unique())
    else:
        ops = {"conv" if "p_direction" in df.columns else "gemm"}
    if len(ops) != 1 or not ops <= set(OPS):
        raise BadInput(f"the rows hold ops {sorted(map(str, ops))}; features need rows of one op of {OPS}",
                       field="op")
    return ops.pop()


# -- the computation (numpy arrays, one per column) ---------------------------------------------------------
def _matrix(op: str, cols: dict[str, Any], n: int, problems: list, configs: list, arch: ArchSpec):
    import numpy as np

    f = _num(cols, "c_")
    out: dict[str, Any] = {}
    padded = _gemm_padded(cols, f) if op == "gemm" else np.zeros(n, dtype=bool)
    extra = object_features(problems, configs, padded, arch)
    out.update({name: np.asarray(values, dtype=np.float64) for name, values in extra.items()})
    view = _gemm_view(cols, f, padded, out) if op == "gemm" else _conv_view(cols, f, out)
    _tile_features(view, f, out, arch)
    _arch_features(out, arch)
    names = NAMES[op]
    return np.column_stack([np.broadcast_to(np.asarray(out[name], dtype=np.float64), (n,)) for name in names])


def _num(cols: dict[str, Any], prefix: str):
    """Numeric columns with `prefix` as float arrays, the prefix stripped (strings stay in `cols`). A column
    of Python ints beyond int64 (the FLOPs of a large problem) is an object array: numeric all the same."""
    import numpy as np

    out = {}
    for key, values in cols.items():
        array = np.asarray(values)
        if key.startswith(prefix) and (array.dtype.kind in "biuf" or _numbers(array)):
            out[key[len(prefix):]] = array.astype(np.float64)
    return out


def _numbers(array) -> bool:
    """Whether an object array holds only real numbers (never strings or None)."""
    return array.dtype.kind == "O" and array.size > 0 and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in array.flat)


def _log2(x):
    import numpy as np

    return np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1e-12))


def _cdiv(a, b):
    import numpy as np

    return np.ceil(a / b)


def _bytes_of(dtypes) -> Any:
    import numpy as np

    return np.array([DTYPES[str(d)].bytes for d in dtypes], dtype=np.float64) if len(dtypes) else np.zeros(0)


def _gemm_padded(cols: dict[str, Any], f: dict[str, Any]):
    """Whether each kernel runs on zero-padded operands (measure.plan_for): a TMA family at align 16 needs
    16-byte rows only, any other kernel needs the problem's align at least its own."""
    import numpy as np

    family = np.asarray(cols["c_family"], dtype=object)
    tma = np.isin(family, TMA_FAMILIES) & (f["align"] == 16)
    need = np.where(tma, np.maximum(1.0, 16.0 / _bytes_of(cols["c_dtype"])), f["align"])
    return np.asarray(cols["p_align"], dtype=np.float64) < need


def _gemm_view(cols: dict[str, Any], c: dict[str, Any], padded, out: dict[str, Any]) -> dict[str, Any]:
    """GEMM: sizes as the kernel runs them (rounded up to 16 when padded), tiles and their waste."""
    import numpy as np

    p = _num(cols, "p_")
    def r16(x):
        return np.where(padded, np.ceil(x / 16.0) * 16.0, x)
    m, n, k, batch = r16(p["m"]), r16(p["n"]), r16(p["k"]), p["batch"]
    family = np.asarray(cols["c_family"], dtype=object)
    split = np.maximum(c["split_k"], 1.0)    # > 1 for splitk and split tma_persistent kernels only
    in_b, out_b = _bytes_of(cols["p_dtype"]), _bytes_of(cols["p_out_dtype"])
    stage = (c["block_m"] * c["block_k"] + c["block_k"] * c["block_n"]) * in_b
    staging_bytes = c["block_m"] * c["block_n"] / np.maximum(c["subtile"], 1) * out_b * (c["subtile"] > 0)
    staging = np.where(family == "tma_persistent", staging_bytes, 0.0)
    tiles_m, tiles_n = _cdiv(m, c["block_m"]), _cdiv(n, c["block_n"])
    out.update(m=m, n=n, k=k, batch=batch, log_m=_log2(m), log_n=_log2(n), log_k=_log2(k), p_align=p["align"],
               padded=padded.astype(np.float64), group_m=c["group_m"], split_k=split, subtile=c["subtile"])
    k_iters = _cdiv(_cdiv(k, split), c["block_k"])
    out["waste_k"] = k_iters * c["block_k"] * split / k
    reread = (m * k * tiles_n + k * n * tiles_m) * batch * in_b
    out["traffic_ratio"] = reread / p["min_bytes"]
    out["tiles_per_program"] = tiles_m * tiles_n * batch * split / np.maximum(out["programs_main"], 1.0)
    for fam in GEMM_FAMILIES:
        out[f"fam_{fam}"] = (family == fam).astype(np.float64)
    return {"rows": m, "cols": n, "tiles_m": tiles_m, "tiles_n": tiles_n,
            "units": tiles_m * tiles_n * batch * split, "k_iters": k_iters,
            "smem": np.maximum(c["num_stages"], 1) * stage + staging,
            "acc": c["block_m"] * c["block_n"], "flops": p["flops"], "bytes": p["min_bytes"]}


def _conv_problem(cols: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    """Convolution problem features and the implicit GEMM (M, N, K) of a group (ConvProblem.implicit_gemm)."""
    import numpy as np

    p = _num(cols, "p_")
    ndim = p["ndim"]
    spatial, filt, stride, output = (_extents(p, name) for name in ("spatial", "filter", "stride", "out"))
    taps, in_px, out_px = np.prod(filt, axis=0), np.prod(spatial, axis=0), np.prod(output, axis=0)
    direction = np.asarray(cols["p_direction"], dtype=object)
    fwd, dgrad = direction == "fwd", direction == "bwd_data"
    cg, kg, nb = p["c_per_group"], p["k_per_group"], p["n"]
    gm = np.where(fwd, nb * out_px, np.where(dgrad, nb * in_px, kg))
    gn = np.where(fwd, kg, np.where(dgrad, cg, cg * taps))
    gk = np.where(fwd, cg * taps, np.where(dgrad, kg * taps, nb * out_px))
    out.update(n=nb, c=p["c"], k=p["k"], groups=p["groups"], c_per_group=cg, k_per_group=kg, ndim=ndim,
               taps=taps, filter_max=np.max(filt, axis=0), stride_prod=np.prod(stride, axis=0),
               dilation_max=np.max(_extents(p, "dilation"), axis=0),
               pad_sum=sum(p[f"pad_{side}_{i}"] for side in ("left", "right") for i in range(3)),
               log_in_px=_log2(nb * in_px), log_out_px=_log2(nb * out_px),
               depthwise=((cg == 1) & (kg == 1)).astype(np.float64), gemm_m=gm, gemm_n=gn, gemm_k=gk,
               log_gemm_m=_log2(gm), log_gemm_n=_log2(gn), log_gemm_k=_log2(gk), p_align=p["align"])
    phase_px = np.prod([np.ceil(s / t) for s, t in zip(spatial, stride)], axis=0)
    return {"p": p, "fwd": fwd, "dgrad": dgrad, "wgrad": direction == "bwd_weight", "taps": taps,
            "in_px": nb * in_px, "out_px": nb * out_px, "phase_px": nb * phase_px, "gm": gm, "gn": gn,
            "spatial": spatial, "output": output}


def _conv_view(cols: dict[str, Any], c: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    """Convolution: the tiled view of each family (rows x columns of a program's tile, reduction steps)."""
    import numpy as np

    v = _conv_problem(cols, out)
    p, fwd, dgrad, wgrad, taps = v["p"], v["fwd"], v["dgrad"], v["wgrad"], v["taps"]
    cg, kg = p["c_per_group"], p["k_per_group"]
    family = np.asarray(cols["c_family"], dtype=object)
    direct, gemm, igemm = family == "direct", family == "gemm", family == "igemm"
    implicit = igemm | (family == "tma")   # tma: the tap loop of igemm over one group, through TMA boxes
    kloop = np.asarray(cols["c_kloop"], dtype=object)
    # bwd_weight 'diagrow' runs the block-diagonal tiles of 'diag', a filter row of them per program
    flat, diag = kloop == "flat", igemm & np.isin(kloop, ("diag", "diagrow"))
    bm, bn, bk, gpp = c["block_m"], c["block_n"], np.maximum(c["block_k"], 1.0), c["groups_per_program"]
    splits = np.maximum(out["splits"], 1.0)
    # igemm fwd / bwd_data: taps (bwd_data: of one stride phase) x channels per tap (diag: one dot per tap);
    # bwd_weight: pixels
    per_tap, tap_steps = np.where(fwd, cg, kg), np.where(dgrad, np.ceil(taps / out["stride_prod"]), taps)
    igemm_iters = np.select([diag, flat], [tap_steps, _cdiv(tap_steps * per_tap, bk)],
                            tap_steps * _cdiv(per_tap, bk))
    direct_iters = np.where(wgrad, _cdiv(v["out_px"] / splits, bm), taps * np.where(dgrad, kg, cg))
    k_iters = np.select([direct, gemm, wgrad], [direct_iters, _cdiv(np.where(dgrad, p["k"], p["c"]), bk),
                                                _cdiv(_cdiv(v["out_px"], bk), splits)], igemm_iters)
    # bwd_weight: taps x channels of a group; diag: one row tile, taps x tiles of whole groups as columns
    rows = np.select([direct & ~dgrad, direct | gemm, wgrad & diag], [v["out_px"], v["in_px"], bm],
                     np.where(dgrad, v["phase_px"], v["gm"]))
    diag_tiles = taps * _cdiv(p["groups"], np.maximum(np.floor(bn / cg), 1.0))
    wgrad_cols = np.select([diag, flat], [diag_tiles * bn, taps * cg], taps * _cdiv(cg, bn) * bn)
    all_channels = np.where(dgrad, p["c"], p["k"])     # direct, gemm and diag tiles span every group
    columns = np.where(direct | gemm | (diag & ~wgrad), all_channels,
                       np.where(wgrad, wgrad_cols, v["gn"]))
    merged = np.where(igemm, gpp, 1.0)
    blocks = np.where(implicit & ~diag, _cdiv(p["groups"], gpp), 1.0)
    tiles_m, tiles_n = _cdiv(rows, bm), _cdiv(columns, bn)
    tma = family == "tma"
    if tma.any():   # its tiles are boxes of one image's pixels (kernels/conv_tma.box_of), not flat rows
        extents = [np.where(dgrad, s, o) for s, o in zip(v["spatial"], v["output"])]
        tiles_m = np.where(tma & ~wgrad, p["n"] * _box_count(p["ndim"], bm, extents, tma & ~wgrad), tiles_m)
        boxes = p["n"] * _box_count(p["ndim"], bk, v["output"], tma & wgrad)
        k_iters = np.where(tma & wgrad, _cdiv(boxes, splits), k_iters)
    # diag: a [BM, BN] x [BN, BN] dot per tap against the block-diagonal weight (BN / BK times the
    # useful work)
    # bwd_weight diag: the [BN, BN] result tile holds BN / (C/G) times the useful pairs
    stage_elems = np.where(diag & ~wgrad, bm * bn + bn * bn, merged * (bm * bk + bk * bn))
    stage = stage_elems * _bytes_of(cols["p_dtype"])
    waste_g = np.select([diag & wgrad, diag], [bn / cg, bn / bk],
                        blocks * merged / np.where(implicit, p["groups"], 1.0))
    # the 1x1-as-GEMM family: split_k 1 runs the tiled GEMM (pointer loads), 0 the TMA persistent one
    out.update(groups_per_program=gpp, group_blocks=blocks, waste_g=waste_g,
               kloop_flat=flat.astype(np.float64), kloop_diag=diag.astype(np.float64),
               kloop_roll=(kloop == "roll").astype(np.float64),
               kloop_halo=(kloop == "halo").astype(np.float64),
               kloop_halofh=(kloop == "halofh").astype(np.float64),
               kloop_im2col=(kloop == "im2col").astype(np.float64),
               gemm_tiled=(gemm & (np.asarray(c["split_k"]) == 1)).astype(np.float64),
               unroll=np.where(direct, bk, 1.0))
    for fam in CONV_FAMILIES:
        out[f"fam_{fam}"] = (family == fam).astype(np.float64)
    return {"rows": rows, "cols": columns, "tiles_m": tiles_m, "tiles_n": tiles_n,
            "units": tiles_m * tiles_n * blocks * splits, "k_iters": k_iters,
            "smem": np.where(direct, 0.0, np.maximum(c["num_stages"], 1) * stage),
            "acc": bm * bn * merged, "flops": p["flops"], "bytes": p["min_bytes"]}


def _extents(p: dict[str, Any], name: str) -> list[Any]:
    """The three `name` extents of each row, outermost first (1 past the problem's ndim)."""
    import numpy as np

    return [np.where(p["ndim"] > i, p[f"{name}_{i}"], 1.0) for i in range(3)]


def _box_count(ndim, pixels, extents: list[Any], mask) -> Any:
    """Per row where `mask` holds: the tma boxes of `pixels` pixels (conv_tma.box_of) that cover one image
    of `extents`; 1 elsewhere."""
    import numpy as np

    from tiledispatch.kernels.conv_tma import box_of

    count = np.ones(len(ndim))
    pairs = np.stack([ndim, pixels], axis=1)[mask]
    for nd, px in {(int(a), int(b)) for a, b in pairs}:
        rows = mask & (ndim == nd) & (pixels == px)
        for extent, size in zip(extents, box_of(nd, px)):
            count = np.where(rows, count * _cdiv(extent, max(size, 1)), count)
    return count


def _tile_features(view: dict[str, Any], c: dict[str, Any], out: dict[str, Any], arch: ArchSpec) -> None:
    """What every op shares: tiles and their waste, occupancy, waves and the idle share of the last one."""
    import numpy as np

    warps = c["num_warps"]
    by_smem = np.where(view["smem"] > 0, arch.smem_per_sm // np.maximum(view["smem"], 1.0), MAX_OCCUPANCY)
    occupancy = np.clip(np.minimum(by_smem, arch.max_warps_per_sm // warps), 1, MAX_OCCUPANCY)
    waves = view["units"] / (arch.sm_count * occupancy)
    full = np.ceil(waves)
    roofline = np.maximum(view["flops"] / (arch.peak_tflops_fp16 * 1e6),
                          view["bytes"] / (arch.hbm_gbps * 1e3))
    out.update(block_m=c["block_m"], block_n=c["block_n"], block_k=c["block_k"], warps=warps,
               stages=c["num_stages"], c_align=c["align"], acc_per_thread=view["acc"] / (32 * warps),
               smem_kb=view["smem"] / 1024, occupancy=occupancy, tiles_m=view["tiles_m"],
               tiles_n=view["tiles_n"], log_tiles=_log2(view["units"]),
               waste_m=view["tiles_m"] * c["block_m"] / view["rows"],
               waste_n=view["tiles_n"] * c["block_n"] / view["cols"], k_iters=view["k_iters"],
               log_k_iters=_log2(view["k_iters"]), waves=waves, last_wave_idle=(full - waves) / full,
               log_critical_steps=_log2(full * view["k_iters"]), log_flops=_log2(view["flops"]),
               log_bytes=_log2(view["bytes"]), intensity=_log2(view["flops"] / view["bytes"]),
               roofline_log_us=_log2(roofline), log_programs=_log2(out["programs_main"]))
    out["tile_fill"] = 1.0 / (out["waste_m"] * out["waste_n"])
    out["rules_rel"] = out["rules_log_us"] - out["roofline_log_us"]


def _arch_features(out: dict[str, Any], arch: ArchSpec) -> None:
    out.update(sm_count=float(arch.sm_count), smem_per_sm_kb=arch.smem_per_sm / 1024,
               peak_tflops=float(arch.peak_tflops_fp16), hbm_gbps=float(arch.hbm_gbps))
