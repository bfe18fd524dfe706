"""The dataset schema of sweeps: one row per (problem, kernel), long format.

A row holds the problem (its signature, its JSON, and every field as a `p_` column, per-dim tuples spread over
`_0.._2` columns), the kernel (its name and every config field as a `c_` column), the outcome (status, error,
median/p20/p80 time, repeats, TF/s, GB/s, relative error) and where it was measured (GPU, arch, clocks,
versions, timestamp). Importing this module does no work.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem

SCHEMA_VERSION = 1
STATUSES = ("ok", "unsupported", "compile_error", "runtime_error", "timeout", "wrong_result")
MAX_DIMS = 3
GEMM_DIRECTION = "none"   # GEMM has no direction; the column holds this value
# Columns every row carries, whatever the op (p_ and c_ columns come on top, per op).
OUTCOME_COLUMNS = ("status", "error", "padded", "time_ms", "p20_ms", "p80_ms", "repeats", "stable", "tflops",
                   "gbps", "rel_err")
STAMP_COLUMNS = ("gpu", "arch", "sm_count", "sm_clock_mhz", "mem_clock_mhz", "tiledispatch", "triton",
                 "torch", "cuda", "schema_version", "sweep_id", "worker", "timestamp")
KEY_COLUMNS = ("op", "direction", "dtype", "problem", "problem_json", "tag", "kernel", "family")
VENDOR_FAMILY = "vendor"


def problem_key(problem: GemmProblem | ConvProblem) -> str:
    """The problem's identity in a dataset (its tuning signature)."""
    return problem.signature()


def problem_json(problem: GemmProblem | ConvProblem) -> str:
    """The problem as JSON (its to_dict); problem_from_json reads it back."""
    return json.dumps(problem.to_dict())


def now() -> str:
    """A row's timestamp: local time to the second, ISO 8601."""
    return datetime.datetime.now().isoformat(timespec="seconds")


def problem_from_json(text: str) -> GemmProblem | ConvProblem:
    data = json.loads(text)
    if "direction" in data:
        return ConvProblem.from_dict(data)
    return GemmProblem.from_dict(data)


def _spread(prefix: str, values: tuple, width: int = MAX_DIMS, fill: int = 0) -> dict[str, int]:
    padded = tuple(values) + (fill,) * (width - len(values))
    return {f"{prefix}_{i}": int(v) for i, v in enumerate(padded)}


def problem_columns(problem: GemmProblem | ConvProblem) -> dict[str, Any]:
    """Every problem field as a `p_` column (plus derived FLOPs and minimal bytes)."""
    if isinstance(problem, GemmProblem):
        cols: dict[str, Any] = {f"p_{k}": getattr(problem, k)
                                for k in ("m", "n", "k", "batch", "dtype",
                                          "out_dtype", "acc_dtype", "layout", "align")}
        e = problem.epilogue
        cols.update(p_activation=e.activation, p_bias=e.bias, p_num_d=e.num_d, p_with_c=bool(e.with_c))
    else:
        cols = {f"p_{k}": getattr(problem, k) for k in ("direction", "n", "c", "k", "groups", "dtype",
                                                        "out_dtype",
                                                      "acc_dtype", "align", "activation", "bias")}
        cols["p_ndim"] = problem.ndim
        cols["p_c_per_group"], cols["p_k_per_group"] = problem.c_per_group, problem.k_per_group
        fill_one = {"spatial": problem.spatial, "filter": problem.filter, "stride": problem.stride,
                    "dilation": problem.dilation, "out": problem.output}
        for name, values in fill_one.items():
            cols.update(_spread(f"p_{name}", values, fill=1))
        cols.update(_spread("p_pad_left", tuple(p[0] for p in problem.padding)))
        cols.update(_spread("p_pad_right", tuple(p[1] for p in problem.padding)))
    cols["p_flops"] = int(problem.flops)
    cols["p_min_bytes"] = int(problem.min_bytes)
    return cols


def config_columns(config: GemmConfig | ConvConfig | None) -> dict[str, Any]:
    """Every config field as a `c_` column (empty for vendor rows)."""
    if config is None:
        return {}
    return {f"c_{f.name}": getattr(config, f.name) for f in dataclasses.fields(config)}


def op_of(problem: GemmProblem | ConvProblem) -> str:
    return "conv" if isinstance(problem, ConvProblem) else "gemm"


def direction_of(problem: GemmProblem | ConvProblem) -> str:
    return problem.direction if isinstance(problem, ConvProblem) else GEMM_DIRECTION


@dataclasses.dataclass
class Outcome:
    """What measuring one (problem, kernel) pair gave."""

    status: str
    error: str = ""
    padded: bool = False
    time_ms: float = math.nan
    p20_ms: float = math.nan
    p80_ms: float = math.nan
    repeats: int = 0
    stable: bool = False
    rel_err: float = math.nan

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r}; legal values: {STATUSES}")


def make_row(problem: GemmProblem | ConvProblem, tag: str, kernel: str,
             config: GemmConfig | ConvConfig | None, outcome: Outcome,
             stamp: dict[str, Any]) -> dict[str, Any]:
    """One dataset row: keys, problem and config columns, the outcome with TF/s and GB/s, the stamp."""
    row: dict[str, Any] = {"op": op_of(problem), "direction": direction_of(problem), "dtype": problem.dtype,
                           "problem": problem_key(problem), "problem_json": problem_json(problem),
                           "tag": tag, "kernel": kernel,
                           "family": config.family if config is not None else VENDOR_FAMILY}
    row.update(problem_columns(problem))
    row.update(config_columns(config))
    row.update(dataclasses.asdict(outcome))
    ok = outcome.status == "ok" and outcome.time_ms > 0
    row["tflops"] = problem.flops / outcome.time_ms / 1e9 if ok else math.nan
    row["gbps"] = problem.min_bytes / outcome.time_ms / 1e6 if ok else math.nan
    row.update({name: stamp.get(name) for name in STAMP_COLUMNS})
    return row
