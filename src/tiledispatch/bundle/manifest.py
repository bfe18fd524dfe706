"""The bundle format: its layout, its manifest, and the verification a bundle passes before anything is used.

    BUNDLE/manifest.json                      versions, arch, contents, a sha256 per file (written last)
    BUNDLE/kernels/<arch>/<name>/<fp>/        build-cache entries, as the loader reads them (build/cache.py)
    BUNDLE/models/<arch>/<key>/               shipped cost models the kernels' keys use (select/cost_model.py)
    BUNDLE/presets/<name>.json                the exported presets, as packaged
    BUNDLE/tuning/<arch>.json                 tuning-DB entries of the arch (select/tuning_db.py), if any

A bundle is refused (BundleError naming the field) unless its format version, tiledispatch and Triton versions
match this process, its arch matches the device's, and every file exists, hashes as listed and is listed.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tiledispatch.errors import BundleError

FORMAT = "tiledispatch-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KERNELS, MODELS, PRESETS, TUNING = "kernels", "models", "presets", "tuning"
_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def running_versions() -> dict[str, str]:
    """The versions a bundle must match (tiledispatch, Triton) and the one it records only (torch)."""
    import triton

    from tiledispatch.version import __version__

    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:   # pragma: no cover - torch is a dependency
        torch_version = "none"
    return {"tiledispatch": __version__, "triton": triton.__version__, "torch": torch_version}


class Bundle:
    """A verified bundle: where its kernels, presets, models and tuning entries are. `served` counts the
    kernels builds took from it; `stats()` adds the compilations since it was loaded."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        self.arch: str = manifest["arch"]
        self.kernels: dict[str, dict[str, str]] = manifest["kernels"]
        self.served = 0
        self._compiled_at_load = 0
        self._tuning: dict[str, dict] | None = None

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r}, {self.arch}, {len(self.kernels)} kernels)"

    def entry(self, name: str, fingerprint: str) -> Path | None:
        """The cache entry of kernel `name` of this fingerprint (same source, versions, arch), or None."""
        row = self.kernels.get(name)
        if row is None or row["fingerprint"] != fingerprint:
            return None
        return self.path / row["path"]

    def preset_file(self, name: str) -> Path | None:
        return self.path / PRESETS / f"{name}.json" if name in self.manifest["presets"] else None

    def model_dir(self, arch: str, key: str) -> Path | None:
        return self.path / MODELS / arch / key if f"{arch}/{key}" in self.manifest["models"] else None

    @property
    def tuning(self) -> dict[str, dict]:
        """The tuning-DB entries of the bundle (device|signature -> winner); read once."""
        if self._tuning is None:
            rel = self.manifest.get("tuning")
            self._tuning = json.loads((self.path / rel).read_text())["entries"] if rel else {}
        return self._tuning

    def mark_loaded(self) -> None:
        from tiledispatch.build.pool import compilations

        self._compiled_at_load = compilations()

    def stats(self) -> dict[str, Any]:
        """Kernels in the bundle, kernels builds took from it, and kernels compiled since it was loaded."""
        from tiledispatch.build.pool import compilations

        return {"path": str(self.path), "arch": self.arch, "kernels": len(self.kernels),
                "served": self.served, "compiled": compilations() - self._compiled_at_load}


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the bundle at `path`, structurally checked (BundleError otherwise)."""
    manifest_path = path / MANIFEST
    if not path.is_dir():
        raise BundleError(f"bundle {path} is not a directory (give the directory `tiledispatch export --out` "
                          "wrote)", field="bundle")
    if not manifest_path.is_file():
        raise BundleError(f"bundle {path} has no {MANIFEST} (not a bundle written by `tiledispatch export`, "
                          "or an export that did not finish)", field="bundle")
    try:
        manifest = json.loads(manifest_path.read_text())
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ValueError(f"'format' is not {FORMAT!r}")
        for key, kind in (("files", dict), ("kernels", dict), ("presets", list), ("models", list),
                          ("arch", str), ("tiledispatch", str), ("triton", str), ("format_version", int)):
            if not isinstance(manifest.get(key), kind):
                raise ValueError(f"{key!r} is missing or not a {kind.__name__}")
        for name, row in manifest["kernels"].items():
            if not (isinstance(row, dict) and isinstance(row.get("fingerprint"), str)
                    and isinstance(row.get("path"), str)):
                raise ValueError(f"kernel {name!r} lacks 'fingerprint' or 'path'")
    except (OSError, ValueError) as exc:
        raise BundleError(f"bundle {path}: {MANIFEST} is malformed ({exc})", field="manifest") from exc
    return manifest


def check_versions(path: Path, manifest: dict[str, Any], arch: str | None, device: str = "") -> None:
    """Refuse a manifest of another format version, tiledispatch, Triton or (unless None) arch."""
    if manifest["format_version"] != FORMAT_VERSION:
        raise BundleError(f"bundle {path} has format_version {manifest['format_version']}; this tiledispatch "
                          f"reads {FORMAT_VERSION} (export it again)", field="format_version")
    running = running_versions()
    for name, label in (("tiledispatch", "tiledispatch"), ("triton", "Triton")):
        if manifest[name] != running[name]:
            raise BundleError(f"bundle {path} was exported with {label} {manifest[name]}, this process runs "
                              f"{label} {running[name]} (export it again with {label} {running[name]})",
                              field=name)
    if arch is not None and manifest["arch"] != arch:
        on = f" ({device})" if device else ""
        raise BundleError(f"bundle {path} holds kernels for {manifest['arch']}, this device is {arch}{on} "
                          f"(export with --gpu-target {arch})", field="arch")


def check_files(path: Path, manifest: dict[str, Any]) -> None:
    """Every listed file exists and hashes as listed; no other file is there."""
    listed: dict[str, str] = manifest["files"]
    for rel, digest in listed.items():
        file = path / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise BundleError(f"bundle {path}: the manifest lists {rel!r}, outside the bundle",
                              field="files")
        if not file.is_file():
            raise BundleError(f"bundle {path}: {rel} is missing (the manifest lists it)", field="files")
        if sha256_of(file) != digest:
            raise BundleError(f"bundle {path}: {rel} does not match its sha256 in the manifest (modified or "
                              "corrupt)", field="files")
    for rel in present_files(path):
        if rel not in listed and rel != MANIFEST:
            raise BundleError(f"bundle {path}: {rel} is not listed in the manifest (added after export)",
                              field="files")


def present_files(path: Path) -> list[str]:
    """Every file under `path`, as a POSIX path relative to it."""
    found = []
    for folder, _, names in os.walk(path):
        for name in names:
            found.append((Path(folder) / name).relative_to(path).as_posix())
    return sorted(found)


def device_arch() -> tuple[str, str]:
    """(arch, device name) of the visible GPU; without one, the configured arch ($TILEDISPATCH_ARCH)."""
    from tiledispatch.arch.spec import cuda_available, detect

    spec = detect()
    return spec.name, (spec.reference_gpu if cuda_available() else "no GPU visible: $TILEDISPATCH_ARCH")


def open_bundle(path: str | Path, arch: str | None = "device") -> Bundle:
    """Verify the bundle at `path` and return it. arch: the arch it must hold ('device': the device's; None:
    any, for a check away from the target machine)."""
    path = Path(path).expanduser().resolve()
    manifest = read_manifest(path)
    device = ""
    if arch == "device":
        arch, device = device_arch()
    check_versions(path, manifest, arch, device)
    check_files(path, manifest)
    return Bundle(path, manifest)
