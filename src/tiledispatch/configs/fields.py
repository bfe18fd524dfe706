"""What every kernel config dataclass does the same way: dtype defaults, field types and construction from a
dict."""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any, TypeVar

from tiledispatch.dtypes import default_acc_dtype, default_out_dtype
from tiledispatch.errors import InvalidConfig, InvalidConfigType, legal
from tiledispatch.problems.bounds import as_int

T = TypeVar("T")


def fill_dtype_defaults(cfg: Any, input_dtypes: tuple[str, ...]) -> None:
    """Set an empty out_dtype / acc_dtype of a frozen config to its input dtype's defaults (left empty for an
    unknown input dtype, which the validity predicate reports)."""
    known = isinstance(cfg.dtype, str) and cfg.dtype in input_dtypes
    if cfg.out_dtype is None or cfg.out_dtype == "":
        object.__setattr__(cfg, "out_dtype", default_out_dtype(cfg.dtype) if known else "")
    if cfg.acc_dtype is None or cfg.acc_dtype == "":
        object.__setattr__(cfg, "acc_dtype", default_acc_dtype(cfg.dtype) if known else "")


_DECLARED: dict[type, tuple[tuple[str, str], ...]] = {}


def _declared(cls: type) -> tuple[tuple[str, str], ...]:
    """(name, declared type) of every field of a config class, read once per class."""
    if cls not in _DECLARED:
        _DECLARED[cls] = tuple((f.name, str(f.type)) for f in dataclasses.fields(cls))
    return _DECLARED[cls]


def check_field_types(cfg: Any) -> None:
    """Every field of a frozen config holds its declared type, so names round-trip and validity compares like
    with like: int fields ints (NumPy integers become ints; floats such as 128.0 and bools are refused), str
    fields strings, bool fields bools or ints (validity names values other than 0 / 1). Raises
    InvalidConfigType naming the field."""
    for name, kind in _declared(type(cfg)):
        value = getattr(cfg, name)
        if kind == "int" and type(value) is not int:
            object.__setattr__(cfg, name, as_int(value, name, InvalidConfigType))
        elif kind == "str" and not isinstance(value, str):
            raise InvalidConfigType(f"{name}={value!r} ({type(value).__name__}) must be a string", field=name)
        elif kind == "bool" and not isinstance(value, numbers.Integral):
            raise InvalidConfigType(f"{name}={value!r} ({type(value).__name__}) must be True or False",
                                    field=name)


def config_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """cls(**data), ignoring the derived keys `op` and `name`; an unknown key raises InvalidConfig naming
    it."""
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - fields - {"op", "name"})
    if unknown:
        raise InvalidConfig(f"unknown {cls.__name__} field(s) {unknown}; legal fields: {sorted(fields)}",
                            field=unknown[0])
    return cls(**{k: v for k, v in data.items() if k in fields})


def choice(errors: list[tuple[str, str]], field: str, value: object, choices: tuple) -> bool:
    """Record (field, reason) in `errors` unless value is one of `choices`; returns whether it is."""
    if value not in choices:
        errors.append((field, f"{field}={value!r} not in {legal(choices)}"))
        return False
    return True


def raise_first_error(cfg: Any, errors: list[tuple[str, str]]) -> None:
    """Raise InvalidConfig naming the first offending field of `errors` (a validity predicate's result)."""
    if errors:
        field, reason = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidConfig(f"{cfg.name}: {reason}{more}", field=field)
