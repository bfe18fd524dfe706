"""What every kernel config dataclass does the same way: dtype defaults and construction from a dict."""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from tiledispatch.dtypes import default_acc_dtype, default_out_dtype
from tiledispatch.errors import InvalidConfig, legal

T = TypeVar("T")


def fill_dtype_defaults(cfg: Any, input_dtypes: tuple[str, ...]) -> None:
    """Set an empty out_dtype / acc_dtype of a frozen config to its input dtype's defaults (left empty for an
    unknown input dtype, which the validity predicate reports)."""
    known = cfg.dtype in input_dtypes
    if not cfg.out_dtype:
        object.__setattr__(cfg, "out_dtype", default_out_dtype(cfg.dtype) if known else "")
    if not cfg.acc_dtype:
        object.__setattr__(cfg, "acc_dtype", default_acc_dtype(cfg.dtype) if known else "")


def config_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """cls(**data), ignoring the derived keys `op` and `name`; an unknown key raises InvalidConfig naming it."""
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
