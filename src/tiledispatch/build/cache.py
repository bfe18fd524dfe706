"""The persistent build cache: <root>/<arch>/<instance name>/<fingerprint>/.

An entry is complete when its manifest.json lists every file with its sha256. Entries are built in a
private temporary directory and renamed into place, so readers never see half an entry and two builders
racing for the same entry both end with one intact copy. A corrupt entry is detected and removed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

MANIFEST = "manifest.json"
SOURCE = "kernel.py"


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


def new_staging_dir(root: Path, arch: str) -> Path:
    staging = root / arch / ".staging" / f"{os.getpid()}-{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    return staging


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
    stats = cache_stats(root)
    if root.exists():
        for child in root.iterdir():
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    return stats["entries"]
