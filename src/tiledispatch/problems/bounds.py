"""The one rule for integer-valued arguments and the bounds of problem sizes, shared by GemmProblem,
ConvProblem, the conv argument parsing and the kernel configs: a value is accepted or refused the same way on
every path.

Integers: Python ints and NumPy integers (taken as ints); bools, floats (even 2.0), strings and anything else
are refused by a TypeError of the hierarchy naming the field. Bounds: every size (GEMM m, n, k, batch; conv
n, c, k, groups, spatial and filter sizes, stride, dilation, padding) is at most MAX_SIZE = 2**31 - 1, what
kernels take as an int32 argument, and no operand or result holds more than MAX_ELEMENTS = 2**48 elements:
more than any device's memory, and far inside int64 byte offsets (2**48 x 8 bytes = 2**51).
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping

from tiledispatch.errors import BadInput, BadInputType, TileDispatchError

MAX_SIZE = 2**31 - 1
MAX_ELEMENTS = 2**48


def as_int(value: object, field: str, kind: type[TileDispatchError] = BadInputType) -> int:
    """value as a Python int (NumPy integers accepted); anything else raises `kind` naming `field`."""
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise kind(f"{field}={value!r} ({type(value).__name__}) must be an int", field=field)
    return int(value)


def size(value: object, field: str, minimum: int = 1) -> int:
    """An int in [minimum, MAX_SIZE] (BadInputType for a non-int, BadInput outside the range)."""
    number = as_int(value, field)
    if number < minimum:
        text = {0: "non-negative", 1: "positive"}.get(minimum, f">= {minimum}")
        raise BadInput(f"{field}={value!r} must be a {text} integer", field=field)
    if number > MAX_SIZE:
        raise BadInput(f"{field}={value!r} is above the largest size 2**31 - 1 = {MAX_SIZE}", field=field)
    return number


def check_elements(tensor: str, factors: Mapping[str, int]) -> None:
    """Refuse a tensor of more than MAX_ELEMENTS elements, naming its largest factor's field."""
    count = 1
    for value in factors.values():
        count *= value
    if count > MAX_ELEMENTS:
        field = max(factors, key=lambda name: factors[name])
        shape = " x ".join(f"{name} {value}" for name, value in factors.items())
        raise BadInput(f"{tensor} would hold {count} elements ({shape}), more than 2**48 = {MAX_ELEMENTS}",
                       field=field)


def mapping(data: object, field: str) -> Mapping:
    """data when it is a mapping (from_dict's argument), else BadInputType naming `field`."""
    if not isinstance(data, Mapping):
        raise BadInputType(f"{field} must be a dict of fields, got {type(data).__name__}", field=field)
    return data


def unknown_keys(data: Mapping, legal: set[str], owner: str, prefix: str = "") -> None:
    """Refuse keys of `data` outside `legal`, naming the first (with `prefix`) and the legal fields."""
    unknown = sorted(prefix + str(key) for key in set(data) - legal)
    if unknown:
        raise BadInput(f"unknown {owner} field(s) {unknown}; legal fields: {sorted(legal)}",
                       field=unknown[0])
