"""Problem and config objects rebuilt from a dataset's `p_` / `c_` columns, and the features that need them:
the analytic `rules` estimate and the kernel's own launch plan (programs, launches, splits, workspace).

Both are per-row Python calls (a few µs each); the objects of a frame are built once per distinct problem and
config. The launch plan is the one the kernel module computes at run time, so split factors chosen per problem
(bwd_weight) and persistent grids (TMA families) are exact, never re-derived here.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.bench.schema import MAX_DIMS
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import DTYPES
from tiledispatch.errors import BadInput
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import Epilogue, GemmProblem

GEMM_PROBLEM_FIELDS = ("m", "n", "k", "batch", "dtype", "out_dtype", "acc_dtype", "layout", "align",
                       "activation", "bias", "num_d", "with_c")
CONV_PROBLEM_FIELDS = ("direction", "n", "c", "k", "groups", "dtype", "out_dtype", "acc_dtype", "align",
                       "activation", "bias", "ndim",
                       *(f"{name}_{i}" for name in ("spatial", "filter", "stride", "dilation", "pad_left",
                                                    "pad_right") for i in range(MAX_DIMS)))
# launch-plan scalars that carry a split factor chosen per problem
SPLIT_SCALARS = ("SPLITS", "SPLIT")
OBJECT_FEATURES = ("rules_log_us", "programs_main", "programs_total", "launches", "workspace_log_bytes",
                   "splits")


def _plain(value: Any) -> Any:
    """A numpy / pandas scalar as a Python int, bool, float or str (float columns of ints become ints)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def gemm_problem(values: dict[str, Any]) -> GemmProblem:
    v = {k: _plain(x) for k, x in values.items()}
    epilogue = Epilogue(v["activation"], v["bias"], int(v["num_d"]), bool(v["with_c"]))
    return GemmProblem(int(v["m"]), int(v["n"]), int(v["k"]), int(v["batch"]), v["dtype"], v["out_dtype"],
                       v["acc_dtype"], v["layout"], epilogue, int(v["align"]))


def conv_problem(values: dict[str, Any]) -> ConvProblem:
    v = {k: _plain(x) for k, x in values.items()}
    ndim = int(v["ndim"])
    def dims(name):
        return tuple(int(v[f"{name}_{i}"]) for i in range(ndim))
    padding = tuple(zip(dims("pad_left"), dims("pad_right")))
    return ConvProblem(v["direction"], int(v["n"]), int(v["c"]), int(v["k"]), int(v["groups"]),
                       dims("spatial"), dims("filter"), dims("stride"), padding, dims("dilation"), v["dtype"],
                       v["out_dtype"], v["acc_dtype"], bool(v["bias"]), v["activation"], int(v["align"]))


def config_from_values(op: str, values: dict[str, Any]) -> GemmConfig | ConvConfig:
    """The config of a row's `c_` values (field name -> value); a vendor row (no config) is refused."""
    if any(_missing(v) for v in values.values()):
        raise BadInput("a row without a kernel config (a vendor row?) has no features; keep kernel rows only",
                       field="family")
    v = {k: _plain(x) for k, x in values.items()}
    if op == "conv":
        v["bias"] = bool(v["bias"])
        return ConvConfig(**v)
    v["with_c"] = bool(v["with_c"])
    return GemmConfig(**v)


def objects_from_columns(op: str, cols: dict[str, Any], config_fields: Sequence[str]) -> tuple[list, list]:
    """(problems, configs) of every row, each distinct one built once."""
    fields = GEMM_PROBLEM_FIELDS if op == "gemm" else CONV_PROBLEM_FIELDS
    build = gemm_problem if op == "gemm" else conv_problem
    p_keys = list(zip(*(cols[f"p_{f}"] for f in fields)))
    c_keys = list(zip(*(cols[f"c_{f}"] for f in config_fields)))
    problems: dict[tuple, Any] = {}
    configs: dict[tuple, Any] = {}
    for key in set(p_keys):
        problems[key] = build(dict(zip(fields, key)))
    for key in set(c_keys):
        configs[key] = config_from_values(op, dict(zip(config_fields, key)))
    return [problems[k] for k in p_keys], [configs[k] for k in c_keys]


@functools.lru_cache(maxsize=64)
def _family_module(op: str, family: str, direction: str) -> Any:
    from tiledispatch.kernels.family import family_module

    cfg = GemmConfig(family=family) if op == "gemm" else ConvConfig(family=family, direction=direction)
    return family_module(cfg)


def object_features(problems: Sequence, configs: Sequence, padded: Sequence[bool], arch: ArchSpec
                    ) -> dict[str, list[float]]:
    """OBJECT_FEATURES of every row: log2 of the rules estimate (µs, padding included as `rules` ranks it) and
    the launch plan of the problem the kernel runs (the padded one when padded)."""
    from tiledispatch.select import conv_rules, rules

    out: dict[str, list[float]] = {name: [] for name in OBJECT_FEATURES}
    runs_of: dict[tuple[int, str], tuple[Any, float]] = {}    # (id(problem), cfg) -> (padded problem, µs)
    sms = arch.sm_count
    for problem, cfg, pad in zip(problems, configs, padded):
        module = _family_module(cfg.op, cfg.family, getattr(cfg, "direction", ""))
        if isinstance(problem, GemmProblem):
            runs, pad_us = problem, 0.0
            if pad:
                key = (id(problem), cfg.name)
                if key not in runs_of:
                    runs_of[key] = _padded_run(cfg, problem, arch)
                runs, pad_us = runs_of[key]
            est = rules.estimate_us(cfg, runs, arch) + pad_us
            plan = module.launch_plan(cfg, runs.m, runs.n, runs.k, runs.batch, sms)
        else:
            est = conv_rules.estimate_us(cfg, problem, arch)
            plan = module.launch_plan(cfg, problem, sms)
        _add_plan(out, plan, cfg)
        out["rules_log_us"].append(math.log2(max(est, 1e-3)))
    return out


def _padded_run(cfg: Any, problem: GemmProblem, arch: ArchSpec) -> tuple[GemmProblem, float]:
    """The padded problem a kernel of cfg runs for `problem` (family.least_padded) and the padding's cost."""
    from tiledispatch.kernels.family import least_padded
    from tiledispatch.select import rules

    padded = least_padded(cfg, problem)
    if padded is None:
        raise BadInput(f"a row marked padded, but its kernel {cfg.name} runs no padded form of "
                       f"{problem.describe()}", field="padded")
    return padded, rules.padding_us(problem, padded, arch)


def _add_plan(out: dict[str, list[float]], plan: Any, cfg: Any) -> None:
    sizes = [x * y * z for x, y, z in plan.grids]
    split = 1
    for name, value in plan.scalars:
        if name in SPLIT_SCALARS:
            split = value
    if cfg.op == "gemm" and cfg.split_k > 1:
        split = cfg.split_k
    workspace = sum(count * DTYPES[dtype].bytes for _, count, dtype in plan.workspaces)
    out["programs_main"].append(max(sizes))
    out["programs_total"].append(sum(sizes))
    out["launches"].append(sum(1 for s in sizes if s > 0))
    out["workspace_log_bytes"].append(math.log2(1.0 + workspace))
    out["splits"].append(split)
