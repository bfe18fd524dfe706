"""A sweep's dataset directory: `manifest.json` plus parquet parts written atomically, one batch of rows each.

    DIR/manifest.json            schema version, op, direction, dtype, GPU, tiledispatch version,
                                 creation date
    DIR/parts/part-*.parquet     rows (schema.make_row), zstd-compressed; a part appears whole or not at all;
                                 compaction packs them into one part (zstd 19, tagged)
    DIR/corrupt/                 parts found unreadable (damaged after writing), moved aside by writers

A pair (problem, kernel) is in the dataset once it is in some readable part; `--resume` skips those pairs. A
damaged part is reported once by name and skipped, so its pairs count as missing. One sweep at a time writes a
directory (a file lock says so). Data of another schema version or another GPU is refused.
"""
from __future__ import annotations

import datetime
import io
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tiledispatch.bench.schema import SCHEMA_VERSION
from tiledispatch.errors import BadInput, CacheError
from tiledispatch.fsutil import atomic_write_bytes, atomic_write_text
from tiledispatch.version import __version__

MANIFEST = "manifest.json"
KIND = "tiledispatch-dataset"
CORRUPT = "corrupt"


def _log_warning(message: str) -> None:
    logging.getLogger("tiledispatch").warning("%s", message)


class Dataset:
    def __init__(self, path: str | Path, warn: Callable[[str], None] = _log_warning) -> None:
        """warn: where a damaged part is reported (once per part and Dataset); the logger by default."""
        self.path = Path(path)
        self.parts_dir = self.path / "parts"
        self.warn = warn
        self.corrupt: list[Path] = []     # damaged parts met so far (where they were found)

    # -- manifest ---------------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def manifest(self) -> dict[str, Any]:
        try:
            data = json.loads(self.manifest_path.read_text())
        except FileNotFoundError:
            raise BadInput(f"{self.path} is not a dataset (no {MANIFEST})", field="data") from None
        except ValueError as exc:
            raise CacheError(f"{self.manifest_path} is not valid JSON ({exc})", field="data") from exc
        if data.get("kind") != KIND:
            raise CacheError(f"{self.manifest_path}: kind={data.get('kind')!r}, expected {KIND!r}",
                             field="kind")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise CacheError(f"{self.path} has schema_version={data.get('schema_version')!r}; this "
                             f"tiledispatch reads {SCHEMA_VERSION} (re-collect the data)",
                             field="schema_version")
        return data

    def open(self, op: str, direction: str, dtype: str, gpu: str, resume: bool,
             extra: dict[str, Any]) -> None:
        """Create the directory for a new sweep, or check that an existing one matches (with resume=True)."""
        if self.exists():
            if not resume:
                raise BadInput(f"{self.path} already holds a dataset; pass --resume to continue it or choose "
                               "another --out", field="out")
            manifest = self.manifest()
            wanted = {"op": op, "direction": direction, "dtype": dtype, "gpu": gpu}
            for field, value in wanted.items():
                if manifest.get(field) != value:
                    raise BadInput(f"cannot resume {self.path}: its {field} is {manifest.get(field)!r}, this "
                                   f"sweep's is {value!r}", field=field)
            return
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        manifest = {"kind": KIND, "schema_version": SCHEMA_VERSION, "op": op, "direction": direction,
                    "dtype": dtype, "gpu": gpu, "tiledispatch": __version__,
                    "created": datetime.datetime.now().isoformat(timespec="seconds"), **extra}
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=1))

    def lock(self):
        """An exclusive lock on the directory (one writer at a time)."""
        from filelock import FileLock

        self.path.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.path / ".lock"), timeout=0)

    # -- rows -------------------------------------------------------------------------------------
    def parts(self) -> list[Path]:
        return sorted(self.parts_dir.glob("part-*.parquet")) if self.parts_dir.exists() else []

    def append(self, rows: list[dict[str, Any]], packed: bool = False) -> Path | None:
        """Write `rows` as one new part, atomically (temporary file, then rename). packed: the encoding of
        compacted parts (see `_packed_parquet`), slower to write; a sweep's batches use the default."""
        if not rows:
            return None
        import pandas as pd

        stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S%f")
        final = self.parts_dir / f"part-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
        frame = pd.DataFrame(rows)
        if packed:
            data = _packed_parquet(frame)
        else:
            buffer = io.BytesIO()
            frame.to_parquet(buffer, compression="zstd", index=False)
            data = buffer.getvalue()
        atomic_write_bytes(final, data)
        return final

    def frame(self, columns: Iterable[str] | None = None, quarantine: bool = False):
        """Every row of the readable parts as a pandas DataFrame (empty when there are none). A damaged part
        is reported and skipped; with quarantine=True (for writers holding the lock) it is also moved to
        DIR/corrupt/, out of every later read."""
        import pandas as pd

        cols = list(columns) if columns is not None else None
        frames = [frame for frame in (self._read(p, cols, quarantine) for p in self.parts())
                  if frame is not None]
        if not frames:
            return pd.DataFrame(columns=cols or [])
        return pd.concat(frames, ignore_index=True)

    def _read(self, part: Path, columns: list[str] | None, quarantine: bool):
        import pandas as pd
        import pyarrow as pa

        try:
            return pd.read_parquet(part, columns=columns)
        except FileNotFoundError:
            raise
        except (pa.ArrowException, OSError) as exc:
            self._damaged(part, exc, quarantine)
            return None

    def _damaged(self, part: Path, exc: Exception, quarantine: bool) -> None:
        """Report a part that cannot be read (one line, once) and, for a writer, move it to DIR/corrupt/."""
        if quarantine:
            (self.path / CORRUPT).mkdir(exist_ok=True)
            os.replace(part, self.path / CORRUPT / part.name)
        if part in self.corrupt:
            return
        self.corrupt.append(part)
        fate = f"moved to {CORRUPT}/, its pairs count as missing" if quarantine else \
            "skipped (`sweep --resume` measures its pairs again)"
        self.warn(f"damaged part {part} ({type(exc).__name__}) {fate}")

    def compact(self) -> Path | None:
        """Rewrite every part as one packed part (the new part is complete before the old ones go: a
        compaction killed in between leaves pairs twice, which `tiledispatch data summary` reports as
        duplicates). A single part already packed stays as it is."""
        frame = self.frame(quarantine=True)
        old = self.parts()
        if not old or (len(old) == 1 and _is_packed(old[0])):
            return old[0] if old else None
        return self.rewrite(frame.to_dict("records"))

    def rewrite(self, rows: list[dict[str, Any]]) -> Path | None:
        """Replace every part by one packed part of `rows` (none when empty), written before the old parts
        go."""
        old = self.parts()
        new = self.append(rows, packed=True) if rows else None
        for path in old:
            path.unlink()
        return new

    def drop(self, families: Iterable[str] = (), kernels: Iterable[str] = ()) -> int:
        """Remove the rows of these kernel families and kernel names (so that `--resume` measures them again
        after their code changed); returns how many went. Written like `compact`: the kept rows as one new
        part before the old parts go."""
        frame = self.frame(quarantine=True)
        if frame.empty:
            return 0
        gone = frame["family"].isin(set(families)) | frame["kernel"].isin(set(kernels))
        if gone.any():
            self.rewrite(frame[~gone].to_dict("records"))
        return int(gone.sum())

    def done_pairs(self, quarantine: bool = False) -> set[tuple[str, str]]:
        """(problem, kernel) pairs already recorded (in readable parts; see `frame` for quarantine)."""
        df = self.frame(["problem", "kernel"], quarantine)
        return set(zip(df["problem"], df["kernel"]))


PACKED_KEY = b"tiledispatch.part"   # parquet schema metadata of a packed part


def _packed_parquet(frame) -> bytes:
    """`frame` as parquet at zstd level 19 with no dictionary for float columns (measured times are nearly
    all distinct, so dictionaries only add pages): 15-20% smaller than the default encoding on the committed
    datasets. Tagged in the schema metadata, so compact leaves it be."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), PACKED_KEY: b"packed"})
    buffer = io.BytesIO()
    dictionary = [f.name for f in table.schema if not pa.types.is_floating(f.type)]
    pq.write_table(table, buffer, compression="zstd", compression_level=19, use_dictionary=dictionary)
    return buffer.getvalue()


def _is_packed(part: Path) -> bool:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return (pq.read_schema(part).metadata or {}).get(PACKED_KEY) == b"packed"
    except (pa.ArrowException, OSError):
        return False   # unreadable: compact rewrites (and quarantines) it


def load_frame(path: str | Path, warn: Callable[[str], None] = _log_warning):
    """The rows of a dataset directory (manifest checked) as a DataFrame (damaged parts reported, skipped)."""
    dataset = Dataset(path, warn)
    dataset.manifest()
    return dataset.frame()
