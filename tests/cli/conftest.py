"""Fixtures of the command-line tests: one build cache per test module."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One build cache for this module, so each instance compiles once."""
    root = tmp_path_factory.mktemp("cli-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEDISPATCH_CACHE_DIR", str(root))
        mp.setenv("TILEDISPATCH_PROGRESS", "0")
        yield root


@pytest.fixture
def cache(cache_dir, monkeypatch):
    """The module cache, set again per test (the session fixture of conftest must not win)."""
    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(cache_dir))
    return cache_dir
