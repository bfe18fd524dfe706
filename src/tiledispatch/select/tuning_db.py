"""The tuning database: measured winners per (device, problem signature), one file per arch + versions."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from pathlib import Path

from filelock import FileLock

from tiledispatch import settings
from tiledispatch.errors import CacheError
from tiledispatch.fsutil import atomic_write_text
from tiledispatch.version import __version__

FORMAT_VERSION = 1
_LOG = logging.getLogger("tiledispatch")


def _stamp(arch: str) -> dict:
    import triton

    return {"format": FORMAT_VERSION, "tiledispatch": __version__, "triton": triton.__version__, "arch": arch}


def default_path(arch: str) -> Path:
    explicit = settings.tuning_db_path()
    if explicit is not None:
        return explicit
    stamp = _stamp(arch)
    digest = hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()[:12]
    return settings.cache_dir() / "tuning" / f"{arch}-{digest}.json"


class TuningDB:
    def __init__(self, arch: str, path: str | Path | None = None) -> None:
        self.arch = arch
        self.path = Path(path) if path is not None else default_path(arch)
        self._entries: dict[str, dict] | None = None
        self.version = 0   # changes whenever the entries this process sees change (memo.Stamp)

    def _read(self) -> dict[str, dict]:
        """The entries on disk. A file that cannot be read, is not a tuning DB, or was written for other
        versions is refused: it is moved aside (reported once) and the DB starts empty, so every strategy
        keeps working."""
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("entries", {}), dict):
                raise ValueError("not a tuning DB (expected an object with 'entries')")
        except (OSError, ValueError) as exc:
            return self._set_aside(f"is unreadable ({exc})")
        stamp = {k: data.get(k) for k in _stamp(self.arch)}
        if stamp != _stamp(self.arch):
            return self._set_aside(f"was written for {stamp}, this process is {_stamp(self.arch)}")
        return data.get("entries", {})

    def _set_aside(self, why: str) -> dict[str, dict]:
        tag = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        aside = self.path.with_name(f"{self.path.name}.refused-{tag}")
        try:
            os.replace(self.path, aside)
        except OSError as exc:
            raise CacheError(f"tuning DB {self.path} {why} and cannot be moved aside ({exc}); delete it",
                             field="tuning_db") from exc
        _LOG.warning("tuning DB %s %s: moved to %s, starting an empty one", self.path, why, aside.name)
        return {}

    @property
    def entries(self) -> dict[str, dict]:
        if self._entries is None:
            self._entries = self._read()
            self.version += 1
        return self._entries

    @staticmethod
    def key(device: str, signature: str) -> str:
        return f"{device}|{signature}"

    def lookup(self, device: str, signature: str) -> dict | None:
        """The winner stored for (device, signature): this DB's, else the active bundle's (bundle/)."""
        key = self.key(device, signature)
        hit = self.entries.get(key)
        if hit is None:
            from tiledispatch.bundle.active import current

            bundle = current()
            if bundle is not None and bundle.arch == self.arch:
                hit = bundle.tuning.get(key)
        return hit

    def store(self, device: str, signature: str, kernel: str, timings_ms: dict[str, float]) -> None:
        """Merge one winner into the file (locked read-modify-write, atomic replace)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:   # a file where a directory of the path should be
            raise CacheError(f"cannot create the tuning DB directory {self.path.parent}: {exc}; set "
                             "TILEDISPATCH_CACHE_DIR or TILEDISPATCH_TUNING_DB to a writable directory",
                             field="TILEDISPATCH_CACHE_DIR") from exc
        with FileLock(str(self.path) + ".lock"):
            entries = self._read()
            entries[self.key(device, signature)] = {
                "kernel": kernel, "time_ms": timings_ms[kernel], "timings_ms": timings_ms,
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            atomic_write_text(self.path, json.dumps({**_stamp(self.arch), "entries": entries}, indent=1))
            self._entries = entries
            self.version += 1
