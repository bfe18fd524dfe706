"""The bundle this process runs from: set by load_bundle, or read lazily from $TILEDISPATCH_BUNDLE on first
use.

The build (registry/store.py) takes kernels from it before the build cache, and the preset, cost-model and
tuning-DB readers consult it first. A bundle named by the environment that fails verification raises
BundleError at every use: nothing falls back to compiling.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from tiledispatch import settings
from tiledispatch.bundle.manifest import Bundle, open_bundle

_LOCK = threading.Lock()


class _State:
    bundle: Bundle | None = None
    strict = False
    from_env: Path | None = None   # the $TILEDISPATCH_BUNDLE value the bundle came from (None: load_bundle)


def current() -> Bundle | None:
    """The active bundle (None without one). An explicitly loaded bundle wins over the environment."""
    state = _State
    if state.bundle is not None and state.from_env is None:
        return state.bundle
    env = settings.bundle_path()
    if env != state.from_env:
        with _LOCK:
            if env != state.from_env:
                if env is None:
                    state.bundle, state.from_env = None, None
                else:
                    bundle = open_bundle(env)   # raises BundleError; nothing is activated then
                    _activate(bundle, settings.bundle_strict(), env)
    return state.bundle


def strict() -> bool:
    """Whether a build with an active bundle must compile nothing (raises BundleError instead)."""
    return _State.strict


def activate(bundle: Bundle, strict: bool) -> None:
    """Run from `bundle` from now on (replaces any other)."""
    with _LOCK:
        _activate(bundle, strict, None)


def _activate(bundle: Bundle, strict: bool, from_env: Path | None) -> None:
    from tiledispatch.memo import bump_build_epoch

    bundle.mark_loaded()
    _State.bundle, _State.strict, _State.from_env = bundle, strict, from_env
    bump_build_epoch()   # decisions remembered before may rest on other models or tuning entries


def deactivate() -> None:
    """Stop running from a loaded bundle ($TILEDISPATCH_BUNDLE, when set, is read again on next use)."""
    from tiledispatch.memo import bump_build_epoch

    with _LOCK:
        _State.bundle, _State.strict, _State.from_env = None, False, None
    bump_build_epoch()


@contextlib.contextmanager
def using(bundle: Bundle, strict: bool = True) -> Iterator[Bundle]:
    """Run from `bundle` inside the block, then go back to what was active before (export-capi reads a
    bundle's kernels and models without changing the process's bundle)."""
    with _LOCK:
        saved = (_State.bundle, _State.strict, _State.from_env)
        _activate(bundle, strict, None)
    try:
        yield bundle
    finally:
        from tiledispatch.memo import bump_build_epoch

        with _LOCK:
            _State.bundle, _State.strict, _State.from_env = saved
        bump_build_epoch()
