"""The persistent build cache: <root>/<arch>/<instance name>/<fingerprint>/.

An entry is complete when its manifest.json lists every file with its sha256. Entries are built in a
private staging directory (<root>/<arch>/.staging/<host>-<pid>-<random>) and renamed into place, so readers
never see half an entry and two builders racing for the same entry both end with one intact copy. A corrupt
entry is detected and removed; the staging directory of a builder that died is swept by the next build.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

from tiledispatch.errors import CacheError

MANIFEST = "manifest.json"
SOURCE = "kernel.py"
STAGING = ".staging"
FOREIGN_STALE_S = 24 * 3600   # a staging dir of another host (shared cache) counts as abandoned after a day


def fingerprint(source: str, arch: str) -> str:
    """Cache key beyond name + arch: tiledispatch version, Triton version and the generated source."""
    import triton

    from tiledispatch.version import __version__

    text = "\0".join((__version__, triton.__version__, arch, source))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry_dir(root: Path, arch: str, name: str, fp: str) -> Path:
    return root / arch / name / fp


def read_entry(path: Path) -> dict | None:
    """The manifest of a complete, uncorrupted entry; None when missing or corrupt."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
        for file_name, digest in manifest["files"].items():
            if sha256_file(path / file_name) != digest:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest


def remove_entry(path: Path) -> None:
    """Move an entry aside atomically, then delete it (readers never see a half-deleted entry)."""
    trash = path.parent / f".trash-{uuid.uuid4().hex}"
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def ensure_root(root: Path) -> None:
    """Create the cache root, or raise CacheError naming the path when it cannot be a directory."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if root.is_dir():
            return
        reason = "it is not a directory"
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), root)
        reason = f"{blocker} is a file, not a directory"
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
    raise CacheError(f"cannot use the build cache dir {root}: {reason} (set TILEDISPATCH_CACHE_DIR, or pass "
                     "cache_dir=, to a directory)", field="TILEDISPATCH_CACHE_DIR")


def new_staging_dir(root: Path, arch: str) -> Path:
    return new_private_dir(root / arch / STAGING)


def sweep_staging(root: Path, arch: str) -> list[Path]:
    """Remove the staging dirs of builders that died (killed mid-compile); returns those removed."""
    return sweep_abandoned(root / arch / STAGING)


def new_private_dir(parent: Path) -> Path:
    """A new <host>-<pid>-<random> directory under `parent`: a writer's private staging dir, which
    sweep_abandoned(parent) removes once its process is gone."""
    path = parent / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}"
    path.mkdir(parents=True)
    return path


def sweep_abandoned(parent: Path) -> list[Path]:
    """Remove the private dirs under `parent` whose writer died; returns those removed."""
    try:
        children = list(parent.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    gone = [child for child in children if _abandoned(child)]
    for child in gone:
        shutil.rmtree(child, ignore_errors=True)
    return gone


def _abandoned(staging: Path) -> bool:
    """A trash dir, the dir of a dead process of this host, or one of another host untouched for a day.
    Names of older versions were <pid>-<random> (this host)."""
    if staging.name.startswith(".trash-"):
        return True
    parts = staging.name.rsplit("-", 2)
    host, pid = (parts[0], parts[1]) if len(parts) == 3 else (socket.gethostname(), parts[0])
    if host == socket.gethostname() and pid.isdigit():
        return not _pid_alive(int(pid))
    try:
        return time.time() - staging.stat().st_mtime > FOREIGN_STALE_S
    except FileNotFoundError:
        return False


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host runs (a zombie waiting to be reaped does not)."""
    if os.name != "posix":   # os.kill(pid, 0) would terminate the process elsewhere
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, another user's
        pass
    if not Path("/proc/self").is_dir():   # no procfs (macOS): zombies count as alive
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):   # it exited meanwhile
        return False


def publish(staging: Path, final: Path, manifest: dict) -> Path:
    """Write the manifest last and rename staging -> final. If another builder won, keep theirs."""
    manifest["files"] = {p.name: sha256_file(p) for p in sorted(staging.iterdir()) if p.name != MANIFEST}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, final)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if read_entry(final) is None:
            raise
    return final


def cache_stats(root: Path) -> dict:
    entries, size = 0, 0
    if root.exists():
        for manifest in root.glob(f"*/*/*/{MANIFEST}"):
            entries += 1
            size += sum(p.stat().st_size for p in manifest.parent.iterdir())
    return {"root": str(root), "entries": entries, "bytes": size}


def clear(root: Path) -> int:
    if root.exists() and not root.is_dir():
        ensure_root(root)   # raises CacheError naming the path
    stats = cache_stats(root)
    if root.exists():
        for child in root.iterdir():
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    return stats["entries"]
