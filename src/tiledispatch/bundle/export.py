"""export_bundle: build (or take from the build cache) the kernels of presets for a target arch, on any
machine, and write them with what selection needs into a bundle directory (format: bundle/manifest.py).

The bundle is written in a private staging directory beside it and renamed into place once complete: an
interrupted export leaves no bundle (a killed one leaves its staging dir, swept by the next export there).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tiledispatch.arch.spec import detect, get_arch
from tiledispatch.build import cache
from tiledispatch.bundle.manifest import (FORMAT, FORMAT_VERSION, KERNELS, MANIFEST, MODELS, PRESETS, TUNING,
                                          open_bundle, read_manifest, running_versions, sha256_of)
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.errors import BadInput, BundleError, CompileError, InvalidConfig, legal
from tiledispatch.presets import load_preset, preset_text
from tiledispatch.problems.gemm import ACTIVATIONS, Epilogue
from tiledispatch.progress import progress_bar
from tiledispatch.registry.store import BuildReport, KernelStore
from tiledispatch.select.cost_model import config_model_key, model_dir, serving_key
from tiledispatch.select.tuning_db import TuningDB


@dataclasses.dataclass
class ExportReport:
    """What an export wrote: where, for which arch, how many kernels / files / bytes, and its build."""

    path: str
    arch: str
    kernels: int
    files: int
    bytes: int
    seconds: float
    build: BuildReport
    models: list[str]
    tuning_entries: int
    skipped: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return (f"{self.kernels} {self.arch} kernels ({self.build}), {len(self.models)} cost models, "
                f"{self.tuning_entries} tuning entries: {self.files} files, {self.bytes / 2**20:.1f} MiB in "
                f"{self.seconds:.1f} s")


def export_bundle(out: str | Path, presets: Iterable[str] = (),
                  configs: Iterable[GemmConfig | ConvConfig | str] = (), arch: str | None = None, *,
                  epilogues: Iterable[str] = (), cache_dir: str | Path | None = None,
                  max_workers: int | None = None, progress: bool | None = None,
                  force: bool = False) -> ExportReport:
    """Write the bundle of `presets` (and extra `configs`) for `arch` (default: the device's, else
    $TILEDISPATCH_ARCH) at `out`. `epilogues` (see parse_epilogue) add the instances of each GEMM and conv
    fwd preset specialised to these fused epilogues, as td.gemm / td.conv declare them for calls with a bias
    or an activation (backward convolutions fuse none). Raises CompileError if a kernel fails to build (no
    bundle is written), and BundleError if `out` exists (force=True replaces an earlier bundle, never another
    directory)."""
    start = time.perf_counter()
    out = Path(out).expanduser().resolve()
    presets = list(dict.fromkeys(presets))
    epilogues = list(dict.fromkeys(epilogues))
    fused = [parse_epilogue(text) for text in epilogues]
    spec = get_arch(arch) if arch is not None else detect()
    _check_out(out, force)
    store = KernelStore(spec, cache_dir=cache_dir)
    for name in presets:
        store.add_preset(name)
        first = load_preset(name)[0]
        conv = isinstance(first, ConvConfig)
        if isinstance(first, ConvConfig) and first.direction != "fwd":   # td.conv_bwd_* fuse no epilogue
            continue
        for activation, bias in fused:
            if conv and bias == "row":
                raise BadInput("epilogue bias_row: a convolution's bias is per output channel (use 'bias')",
                               field="epilogue")
            store.add_preset(name, (activation, bias != "none") if conv else Epilogue(activation, bias))
    for cfg in configs:
        store.add(parse_name(cfg) if isinstance(cfg, str) else cfg)
    if len(store) == 0:
        raise InvalidConfig(f"nothing to export: no preset or config valid for {spec.name} was given",
                            field="preset")
    report = store.build(max_workers, progress)
    if report.failed:
        name, reason = next(iter(report.failed.items()))
        raise CompileError(f"{len(report.failed)} of {len(store)} kernels failed to build, so no bundle was "
                           f"written; first: {name}: {reason}", field="build")
    keys = {serving_key(spec.name, config_model_key(k.config)) for k in store.kernels}
    models = sorted(f"{spec.name}/{key}" for key in keys if key is not None)
    tuning = _tuning_entries(spec.name)
    with staged(out, force) as staging:
        manifest = _write(staging, store, presets, epilogues, models, tuning, progress)
    open_bundle(out, arch=spec.name)   # read back: every hash as written
    return ExportReport(str(out), spec.name, len(manifest["kernels"]), len(manifest["files"]),
                        manifest["bytes"], time.perf_counter() - start, report, models, len(tuning),
                        dict(store.skipped))


def parse_epilogue(text: str) -> tuple[str, str]:
    """(activation, bias mode) of an epilogue written as '+'-joined words: an activation, `bias` (a GEMM's
    per-column bias, as td.gemm(bias=...) and nn.Linear use, or a convolution's), `bias_row`, `bias_col`;
    `none` alone is the identity. E.g. `relu+bias`, `gelu`, `silu+bias_row`."""
    activation, bias = "none", "none"
    words = [word.strip().lower() for word in text.split("+") if word.strip()]
    for word in words:
        if word in ("bias", "bias_col", "bias_row"):
            bias = "row" if word == "bias_row" else "col"
        elif word in ACTIVATIONS and activation == "none":
            activation = word
        else:
            raise BadInput(f"epilogue {text!r}: {word!r} is not valid; legal words: "
                           f"{legal((*ACTIVATIONS[1:], 'bias', 'bias_col', 'bias_row'))} (one activation), "
                           "or 'none'", field="epilogue")
    if not words:
        raise BadInput("epilogue '': give e.g. 'relu+bias' or 'none'", field="epilogue")
    return activation, bias


def _check_out(out: Path, force: bool) -> None:
    if not out.exists():
        return
    if not force:
        raise BundleError(f"--out {out} exists; remove it or pass --force to replace the bundle there",
                          field="out")
    if out.is_dir() and not any(out.iterdir()):
        return
    try:
        read_manifest(out)
    except BundleError:
        raise BundleError(f"--out {out} exists and is not a bundle; --force replaces only a bundle",
                          field="out") from None


def _tuning_entries(arch: str) -> dict[str, dict]:
    """This machine's tuning-DB entries of the arch (those of an active bundle underneath)."""
    from tiledispatch.bundle.active import current

    bundle = current()
    entries = dict(bundle.tuning) if bundle is not None and bundle.arch == arch else {}
    entries.update(TuningDB(arch).entries)
    return entries


def _write(staging: Path, store: KernelStore, presets: list[str], epilogues: list[str], models: list[str],
           tuning: dict[str, dict], progress: bool | None) -> dict[str, Any]:
    """Copy everything into `staging`, hash it, and write the manifest last."""
    arch = store.arch.name
    copies: list[tuple[Path, str]] = []
    kernels = {}
    for kernel in store.kernels:
        entry = kernel.entry_dir
        assert entry is not None   # built: the build raised otherwise
        rel = f"{KERNELS}/{arch}/{kernel.name}/{entry.name}"
        kernels[kernel.name] = {"fingerprint": entry.name, "path": rel}
        copies += [(file, f"{rel}/{file.name}") for file in sorted(entry.iterdir()) if file.is_file()]
    for key in models:
        source = model_dir(*key.split("/", 1))
        copies += [(file, f"{MODELS}/{key}/{file.name}") for file in sorted(source.iterdir())
                   if file.is_file()]
    files: dict[str, str] = {}
    with progress_bar(f"writing the bundle ({len(copies)} files)", len(copies), progress) as advance:
        for source, rel in copies:
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            files[rel] = sha256_of(target)
            advance()
    for name in presets:
        files[f"{PRESETS}/{name}.json"] = _write_text(staging, f"{PRESETS}/{name}.json", preset_text(name))
    tuning_rel = None
    if tuning:
        tuning_rel = f"{TUNING}/{arch}.json"
        files[tuning_rel] = _write_text(staging, tuning_rel, json.dumps({"arch": arch, "entries": tuning},
                                                                        indent=1, sort_keys=True))
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, **running_versions(), "arch": arch,
        "cuda_target": {"backend": "cuda", "arch": store.arch.cc, "warp_size": 32},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "presets": presets, "epilogues": epilogues, "kernels": kernels, "skipped": dict(store.skipped),
        "models": models,
        "tuning": tuning_rel, "tuning_entries": len(tuning),
        "bytes": sum((staging / rel).stat().st_size for rel in files), "files": files,
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _write_text(staging: Path, rel: str, text: str) -> str:
    target = staging / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return sha256_of(target)


@contextlib.contextmanager
def staged(out: Path, replace: bool) -> Iterator[Path]:
    """A private staging dir beside `out` (`.<name>.partial/`, whose abandoned dirs are swept first); on a
    normal exit it is renamed to `out` (an earlier `out`, with `replace`, is moved aside first, then
    deleted). Whatever happens, nothing of the staging dir is left behind."""
    parent = out.parent / f".{out.name}.partial"
    cache.sweep_abandoned(parent)
    staging = cache.new_private_dir(parent)
    try:
        yield staging
        _publish(staging, out, replace)
    finally:
        shutil.rmtree(staging, ignore_errors=True)   # gone already after a successful publish
        _remove_if_empty(parent)


def _publish(staging: Path, out: Path, force: bool) -> None:
    """Rename the complete staging dir to `out` (an earlier bundle there is moved aside first, then
    deleted)."""
    aside = None
    if out.exists() and force:
        aside = out.with_name(f".{out.name}.old-{uuid.uuid4().hex}")
        os.rename(out, aside)
    try:
        os.rename(staging, out)
    except OSError:
        if aside is not None:
            os.rename(aside, out)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:   # other exports are writing there, or it is gone
        pass
