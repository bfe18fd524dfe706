"""Every TILEDISPATCH_* environment variable, read lazily (nothing happens at import time)."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tiledispatch.errors import BadInput

_N = TypeVar("_N", int, float)

ENV_VARS = {
    "TILEDISPATCH_CACHE_DIR": "root of the build cache and tuning DB (default ~/.cache/tiledispatch)",
    "TILEDISPATCH_ARCH": "target arch when no GPU is visible (default sm_90)",
    "TILEDISPATCH_MAX_WORKERS": "compile worker processes (default: CPU count)",
    "TILEDISPATCH_TUNING_DB": "path of the tuning database file (default: under the cache dir)",
    "TILEDISPATCH_PROGRESS": "0 disables progress bars (default: on when stderr is a terminal)",
    "TILEDISPATCH_INTERPRET": "1 forces Triton's interpreter even for CUDA tensors (debugging)",
    "TILEDISPATCH_MEASURE": "0 stops `auto` from timing its top plans when the cost model is unsure (default "
                            "on)",
    "TILEDISPATCH_VENDOR_MARGIN": "how much faster (fraction) one of our plans must be timed than the "
                                  "vendor's to be picked over it (default 0.03)",
    "TILEDISPATCH_MEASURE_TOP_K": "plans `auto` times when unsure, besides those the model cannot rank "
                                  "(default 5 for convolutions, 3 for GEMMs)",
    "TILEDISPATCH_RANK_SPACE": "1: `auto` ranks every declared config of a key's full space with the cost "
                               "model and compiles the pick on first use; 0: it ranks the prebuilt "
                               "essential presets only (default 0; never on Triton's interpreter)",
    "TILEDISPATCH_BUNDLE": "path of a bundle written by `tiledispatch export`: verified on first use, then "
                           "registries load their kernels from it (see load_bundle)",
    "TILEDISPATCH_BUNDLE_STRICT": "1: with a bundle, a build that would compile a kernel the bundle lacks "
                                  "raises BundleError instead (default 0: it compiles and warns)",
    "TILEDISPATCH_VENDOR": "0: selection never takes the vendor library's plans (cuBLAS / cuDNN), only our "
                           "kernels (default 1); read when a decision is made, so set it before the first "
                           "call or call dispatch.defaults.reset() after changing it",
}


def _get(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def snapshot() -> dict[str, str]:
    """The TILEDISPATCH_* variables that are set, as given: what a result file records of its run."""
    return {name: value for name in ENV_VARS if (value := _get(name)) is not None}


def cache_dir() -> Path:
    value = _get("TILEDISPATCH_CACHE_DIR")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "tiledispatch"


def default_arch() -> str:
    return _get("TILEDISPATCH_ARCH") or "sm_90"


def _number(name: str, parse: Callable[[str], _N], default: _N, valid: Callable[[_N], bool],
            legal: str) -> _N:
    """A numeric variable: `default` when unset; raises naming the variable when its value does not parse
    (int or float) or is not `valid` (`legal` says what is)."""
    value = _get(name)
    if value is None:
        return default
    try:
        number = parse(value)
    except ValueError:
        kind = "an integer" if parse is int else "a number"
        raise BadInput(f"{name}={value!r} is not {kind}", field=name) from None
    if not valid(number):
        raise BadInput(f"{name}={number} must be {legal}", field=name)
    return number


def max_workers() -> int:
    return _number("TILEDISPATCH_MAX_WORKERS", int, max(1, os.cpu_count() or 1), lambda n: n >= 1, ">= 1")


def tuning_db_path() -> Path | None:
    value = _get("TILEDISPATCH_TUNING_DB")
    return Path(value).expanduser() if value else None


def progress_enabled() -> bool | None:
    """True/False when forced by the environment, None to decide from the terminal."""
    value = _get("TILEDISPATCH_PROGRESS")
    return None if value is None else value not in ("0", "false", "no")


def force_interpreter() -> bool:
    return _get("TILEDISPATCH_INTERPRET") in ("1", "true", "yes")


def measure_when_unsure() -> bool:
    """Whether `auto` times its top plans on the GPU when the cost model is unsure (see
    dispatch/decide.py)."""
    return _get("TILEDISPATCH_MEASURE") not in ("0", "false", "no")


# held-out H200 problems, fastest of the model's top k vs the oracle, mean / P10 (feature spec 4): conv fwd
# k3 99.1 / 97.5%, k5 99.6 / 100%; bwd_data k3 99.2 / 99.2%, k5 99.7 / 100%; GEMM bf16 / fp16 k3 99.7 / 100%.
# Conv takes 5: unseen layers rank worse than held-out ones (docs/design/rank_space.md)
MEASURE_TOP_K = {"conv": 5, "gemm": 3}


def measure_top_k(op: str = "gemm") -> int:
    """Plans `auto` times when unsure for problems of `op` ('conv' or 'gemm'): the variable, else
    MEASURE_TOP_K[op]."""
    return _number("TILEDISPATCH_MEASURE_TOP_K", int, MEASURE_TOP_K[op], lambda k: k >= 1, ">= 1")


def _switch(name: str, unset: str) -> bool | None:
    """A strict on/off variable: True / False for the spellings of 1 / 0, None when unset; anything else
    raises naming the variable (`unset` says what unset means)."""
    value = _get(name)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise BadInput(f"{name}={value!r} is not valid; legal values: '1', '0' (or unset: {unset})", field=name)


def rank_space() -> bool | None:
    """Whether `auto` ranks the full declared space and compiles its pick on demand (dispatch/space.py):
    True / False when TILEDISPATCH_RANK_SPACE says so, None when unset (on for CUDA registries)."""
    return _switch("TILEDISPATCH_RANK_SPACE", "on for CUDA")


def bundle_path() -> Path | None:
    """The bundle TILEDISPATCH_BUNDLE names (None when unset)."""
    value = _get("TILEDISPATCH_BUNDLE")
    return Path(value).expanduser() if value else None


def bundle_strict() -> bool:
    return _switch("TILEDISPATCH_BUNDLE_STRICT", "0") is True


def vendor_margin() -> float:
    """How much faster (a fraction of its time) one of our plans must be timed than the vendor's plan to be
    picked over it (TILEDISPATCH_VENDOR_MARGIN, default 0.03: ties and timer noise go to the vendor)."""
    return _number("TILEDISPATCH_VENDOR_MARGIN", float, 0.03, lambda m: 0.0 <= m < 1.0, "in [0, 1)")


def vendor_plans() -> bool:
    """Whether selection may take the vendor library's plans (TILEDISPATCH_VENDOR, default on)."""
    return _switch("TILEDISPATCH_VENDOR", "on") is not False
