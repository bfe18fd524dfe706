"""load_bundle: verify a bundle and make this process run from it (public API)."""
from __future__ import annotations

from pathlib import Path

from tiledispatch import settings
from tiledispatch.bundle import active
from tiledispatch.bundle.manifest import Bundle, open_bundle


def load_bundle(path: str | Path, *, strict: bool | None = None) -> Bundle:
    """Verify the bundle `tiledispatch export` wrote at `path` (format, tiledispatch and Triton versions, the
    device's arch, every file's sha256) and run from it: builds, including those of td.gemm / td.conv*'s
    default registries (forgotten here, so they are made again from the bundle), take its kernels instead of
    compiling; its presets, cost models and tuning entries are used. Raises BundleError naming the mismatch.

    strict: a build that would still compile a kernel (one the bundle lacks) raises BundleError instead of
    compiling it with a warning (default: $TILEDISPATCH_BUNDLE_STRICT, else False). `bundle.stats()` counts
    the kernels served and compiled since."""
    bundle = open_bundle(path)
    active.activate(bundle, settings.bundle_strict() if strict is None else strict)
    from tiledispatch.dispatch import defaults

    defaults.reset()
    return bundle
