"""The problems a C library is exported for: read from a JSON file, each with the exact strides it is bound
for, and the integer key the generated C looks it up by (the same numbers td_gemm / td_conv build from their
arguments; layout in bundle/capi/__init__.py).

A dimension of size 1 has its stride left out of the key (set to 0): no kernel steps along it, so a caller's
tensor may hold any stride there (torch gives such dims arbitrary strides after a view).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from tiledispatch.errors import BadInput, legal
from tiledispatch.problems.conv import ConvProblem

GEMM_DTYPES = {"fp16": 1, "bf16": 2, "fp32": 3, "tf32": 4}   # TD_F16, TD_BF16, TD_F32, TD_TF32
CONV_DTYPES = {"fp16": 1, "bf16": 2, "fp32": 3}
DIRECTIONS = {"fwd": 0, "bwd_data": 1, "bwd_weight": 2}       # TD_FWD, TD_BWD_DATA, TD_BWD_WEIGHT
OP_GEMM, OP_CONV = 0, 1
GEMM_KEY_LEN, CONV_KEY_LEN = 15, 41
GEMM_STRIDES_AT, CONV_STRIDES_AT = 6, 26   # where the strides start in a key (what TD_ERR_STRIDES compares)
MAX_SPATIAL = 3
_GEMM_FIELDS = ("m", "n", "k", "dtype", "layout", "batch", "a_strides", "b_strides", "out_strides",
                "instance")
_CONV_FIELDS = ("direction", "dtype", "n", "c", "k", "groups", "spatial", "filter", "stride", "padding",
                "dilation", "x_strides", "w_strides", "y_strides", "instance")


@dataclasses.dataclass(frozen=True)
class GemmSpec:
    """out (batch, m, n) = a (batch, m, k) @ b (batch, k, n); strides in elements as (batch, row, column)."""

    m: int
    n: int
    k: int
    dtype: str
    batch: int
    a_strides: tuple[int, int, int]
    b_strides: tuple[int, int, int]
    out_strides: tuple[int, int, int]
    instance: str | None = None    # pin the plan to this kernel (else selection chooses)
    layout: str = "rcr"            # decides the major order of a size-1 dim's operand (not part of the key)

    op = "gemm"

    def key(self) -> list[int]:
        dims = {"a": (self.batch, self.m, self.k), "b": (self.batch, self.k, self.n),
                "out": (self.batch, self.m, self.n)}
        strides = [*self.a_strides, *self.b_strides, *self.out_strides]
        sizes = [*dims["a"], *dims["b"], *dims["out"]]
        return [OP_GEMM, GEMM_DTYPES[self.dtype], self.batch, self.m, self.n, self.k,
                *normalized(sizes, strides)]

    def describe(self) -> str:
        return (f"gemm {self.dtype} batch={self.batch} m={self.m} n={self.n} k={self.k} a_strides="
                f"{self.a_strides} b_strides={self.b_strides} out_strides={self.out_strides}")


@dataclasses.dataclass(frozen=True)
class ConvSpec:
    """A convolution problem and the strides (torch order: (N, C, *spatial), (K, C/G, *filter),
    (N, K, *out)) of x (input; dx for bwd_data), w (weight; dw for bwd_weight) and y (output; dy)."""

    problem: ConvProblem
    x_strides: tuple[int, ...]
    w_strides: tuple[int, ...]
    y_strides: tuple[int, ...]
    instance: str | None = None

    op = "conv"

    def key(self) -> list[int]:
        p = self.problem
        pad = MAX_SPATIAL - p.ndim
        geometry = [list(v) + [0] * pad for v in (p.spatial, p.filter, p.stride, [lo for lo, _ in p.padding],
                                                   [hi for _, hi in p.padding], p.dilation)]
        shapes = conv_shapes(p)
        strides: list[int] = []
        for role, given in (("x", self.x_strides), ("w", self.w_strides), ("y", self.y_strides)):
            strides += normalized(list(shapes[role]), list(given)) + [0] * pad
        return [OP_CONV, DIRECTIONS[p.direction], CONV_DTYPES[p.dtype], p.ndim, p.n, p.c, p.k, p.groups,
                *(v for values in geometry for v in values), *strides]

    def describe(self) -> str:
        return (f"{self.problem.describe()} x_strides={self.x_strides} w_strides={self.w_strides} "
                f"y_strides={self.y_strides}")


ProblemSpec = GemmSpec | ConvSpec


def conv_shapes(p: ConvProblem) -> dict[str, tuple[int, ...]]:
    """torch shapes of x, w and y."""
    return {"x": (p.n, p.c, *p.spatial), "w": (p.k, p.c_per_group, *p.filter), "y": (p.n, p.k, *p.output)}


def normalized(sizes: list[int], strides: list[int]) -> list[int]:
    """The strides with those of dims of size 1 set to 0 (never stepped: not part of a key)."""
    return [0 if size == 1 else stride for size, stride in zip(sizes, strides)]


def fnv1a(words: list[int]) -> int:
    """FNV-1a over int64 words, one word per step (h = (h ^ word) * prime mod 2**64): what the C computes."""
    h = 0xCBF29CE484222325
    for word in words:
        h = ((h ^ (word & 0xFFFFFFFFFFFFFFFF)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def matrix_strides(letter: str, rows: int, cols: int, field: str) -> tuple[int, int, int]:
    """(batch, row, column) strides of a dense row- ('r') or column-major ('c') matrix."""
    if letter == "r":
        return rows * cols, cols, 1
    if letter == "c":
        return rows * cols, 1, rows
    raise BadInput(f"{field}: layout letter {letter!r} is not 'r' or 'c'", field=field)


def channels_last_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a dense channels-last tensor of torch shape (B, C, *S)."""
    channels, spatial = shape[1], shape[2:]
    inner = [channels * math.prod(spatial[i + 1:]) for i in range(len(spatial))]
    return (channels * math.prod(spatial), 1, *inner)


def gemm_spec(row: dict[str, Any], where: str) -> GemmSpec:
    _check_fields(row, _GEMM_FIELDS, where)
    layout = row.get("layout", "rcr")
    if not isinstance(layout, str) or len(layout) != 3 or layout[2] != "r" or set(layout) - {"r", "c"}:
        raise BadInput(f"{where}: layout={layout!r}; legal: 'rrr', 'rcr', 'crr', 'ccr' (out is row-major)",
                       field="layout")
    dtype = row.get("dtype", "bf16")
    if dtype not in GEMM_DTYPES:
        raise BadInput(f"{where}: dtype={dtype!r}; the C ABI runs {legal(GEMM_DTYPES)}", field="dtype")
    m, n, k, batch = (_int(row, name, where) for name in ("m", "n", "k", "batch"))
    strides = {"a_strides": matrix_strides(layout[0], m, k, "layout"),
               "b_strides": matrix_strides(layout[1], k, n, "layout"),
               "out_strides": matrix_strides("r", m, n, "layout")}
    for name in strides:
        if name in row:
            strides[name] = _strides(row[name], 3, f"{where}: {name}")
    return GemmSpec(m, n, k, dtype, batch, strides["a_strides"], strides["b_strides"], strides["out_strides"],
                    _instance(row, where), layout)


def conv_spec(row: dict[str, Any], where: str) -> ConvSpec:
    _check_fields(row, _CONV_FIELDS, where)
    if row.get("dtype", "bf16") not in CONV_DTYPES:
        raise BadInput(f"{where}: dtype={row.get('dtype')!r}; the C ABI runs {legal(CONV_DTYPES)}",
                       field="dtype")
    fields = {name: row[name] for name in _CONV_FIELDS[:11] if name in row}
    fields.setdefault("groups", 1)
    try:
        problem = ConvProblem(**fields)
    except TypeError as exc:
        raise BadInput(f"{where}: {exc}", field="conv") from exc
    strides = {role: _strides(row[f"{role}_strides"], len(shape), f"{where}: {role}_strides")
               if f"{role}_strides" in row else channels_last_strides(shape)
               for role, shape in conv_shapes(problem).items()}
    return ConvSpec(problem, strides["x"], strides["w"], strides["y"], _instance(row, where))


def read_problems(path: str | Path) -> list[ProblemSpec]:
    """The problems of a JSON file {"gemm": [{m, n, k, dtype, layout, ...}], "conv": [{direction, dtype, n, c,
    k, spatial, filter, stride, padding, dilation, groups, ...}]} (see docs/design/bundle_capi.md)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"--problems {path}: cannot read it as JSON ({exc})", field="problems") from exc
    return parse_problems(data, str(path))


def parse_problems(data: Any, source: str = "problems") -> list[ProblemSpec]:
    if not isinstance(data, dict) or not set(data) <= {"gemm", "conv"} or not data:
        raise BadInput(f"{source}: expected an object with a 'gemm' and/or a 'conv' list", field="problems")
    specs: list[ProblemSpec] = []
    for op, parse in (("gemm", gemm_spec), ("conv", conv_spec)):
        rows = data.get(op, [])
        if not isinstance(rows, list):
            raise BadInput(f"{source}: '{op}' must be a list of problems", field=op)
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise BadInput(f"{source}: {op}[{i}] must be an object", field=op)
            specs.append(parse(row, f"{source}: {op}[{i}]"))
    keys: dict[tuple[int, ...], str] = {}
    for spec in specs:
        key = tuple(spec.key())
        if key in keys:
            raise BadInput(f"{source}: {spec.describe()} is listed twice (as {keys[key]})", field="problems")
        keys[key] = spec.describe()
    if not specs:
        raise BadInput(f"{source}: no problem listed", field="problems")
    return specs


def _check_fields(row: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(row) - set(known))
    if unknown:
        raise BadInput(f"{where}: unknown field(s) {legal(unknown)}; legal: {legal(known)}", field=unknown[0])


def _int(row: dict[str, Any], name: str, where: str) -> int:
    value = row.get(name, 1 if name == "batch" else None)
    if type(value) is not int or value < 1:
        raise BadInput(f"{where}: {name}={value!r} must be a positive int", field=name)
    return value


def _strides(value: Any, length: int, where: str) -> Any:
    if (not isinstance(value, list) or len(value) != length
            or any(type(v) is not int or v < 0 for v in value)):
        raise BadInput(f"{where}={value!r} must be a list of {length} non-negative ints (elements)",
                       field=where.rsplit(" ", 1)[-1])
    return tuple(value)


def _instance(row: dict[str, Any], where: str) -> str | None:
    value = row.get("instance")
    if value is not None and not isinstance(value, str):
        raise BadInput(f"{where}: instance={value!r} must be a kernel name", field="instance")
    return value
