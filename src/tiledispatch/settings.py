"""Every TILEDISPATCH_* environment variable, read lazily (nothing happens at import time)."""
from __future__ import annotations

import os
from pathlib import Path

from tiledispatch.errors import BadInput

ENV_VARS = {
    "TILEDISPATCH_CACHE_DIR": "root of the build cache and tuning DB (default ~/.cache/tiledispatch)",
    "TILEDISPATCH_ARCH": "target arch when no GPU is visible (default sm_90)",
    "TILEDISPATCH_MAX_WORKERS": "compile worker processes (default: CPU count)",
    "TILEDISPATCH_TUNING_DB": "path of the tuning database file (default: under the cache dir)",
    "TILEDISPATCH_PROGRESS": "0 disables progress bars (default: on when stderr is a terminal)",
    "TILEDISPATCH_INTERPRET": "1 forces Triton's interpreter even for CUDA tensors (debugging)",
}


def _get(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def cache_dir() -> Path:
    value = _get("TILEDISPATCH_CACHE_DIR")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "tiledispatch"


def default_arch() -> str:
    return _get("TILEDISPATCH_ARCH") or "sm_90"


def max_workers() -> int:
    value = _get("TILEDISPATCH_MAX_WORKERS")
    if value is None:
        return max(1, os.cpu_count() or 1)
    try:
        workers = int(value)
    except ValueError:
        raise BadInput(f"TILEDISPATCH_MAX_WORKERS={value!r} is not an integer", field="TILEDISPATCH_MAX_WORKERS")
    if workers < 1:
        raise BadInput(f"TILEDISPATCH_MAX_WORKERS={workers} must be >= 1", field="TILEDISPATCH_MAX_WORKERS")
    return workers


def tuning_db_path() -> Path | None:
    value = _get("TILEDISPATCH_TUNING_DB")
    return Path(value).expanduser() if value else None


def progress_enabled() -> bool | None:
    """True/False when forced by the environment, None to decide from the terminal."""
    value = _get("TILEDISPATCH_PROGRESS")
    return None if value is None else value not in ("0", "false", "no")


def force_interpreter() -> bool:
    return _get("TILEDISPATCH_INTERPRET") in ("1", "true", "yes")
