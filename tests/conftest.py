"""Test configuration shared by every lane.

- markers: `gpu` (skipped without a CUDA device) and `slow` (long CPU-lane tests; they still run by default,
  deselect with `-m "not slow"`);
- the whole session uses a private TILEDISPATCH_CACHE_DIR (and Triton cache), never ~/.cache; tests that need
  a clean cache point TILEDISPATCH_CACHE_DIR at their own tmp_path with monkeypatch;
- a fixed torch seed per test;
- `build_registry(configs)`: a Registry of the given configs, built (max_workers=2). The first call compiles every
  config of the CPU lane's suites at once (one worker pool), later calls are served from the cache.

TRITON_INTERPRET is deliberately left alone: tiledispatch runs CPU tensors through the interpreter by itself and
its build workers must compile.
"""
from __future__ import annotations

import os

import pytest
import torch

import tiledispatch as td

ISOLATED_ENV = ("TILEDISPATCH_TUNING_DB", "TILEDISPATCH_INTERPRET", "TILEDISPATCH_MAX_WORKERS", "TILEDISPATCH_ARCH")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: long CPU-lane test (runs by default; deselect with -m 'not slow')")
    # Triton 3.6's interpreter warns on every scalar conversion (NumPy >= 1.25) and on exp overflow in
    # saturating activations (exp(-x) -> inf gives the correct limit); recording ~10^4 warnings costs minutes.
    config.addinivalue_line("filterwarnings", "ignore:Conversion of an array with ndim > 0:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:overflow encountered in exp:RuntimeWarning")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory):
    """Point the build cache, tuning DB and Triton's cache at a session tmp dir; clear env overrides."""
    root = tmp_path_factory.mktemp("tiledispatch-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEDISPATCH_CACHE_DIR", str(root))
        mp.setenv("TRITON_CACHE_DIR", str(root / ".triton-main"))
        mp.setenv("TILEDISPATCH_PROGRESS", "0")
        for name in ISOLATED_ENV:
            mp.delenv(name, raising=False)
        yield root


@pytest.fixture(autouse=True)
def fixed_seed():
    torch.manual_seed(20240611)


@pytest.fixture(scope="session")
def universe(isolated_cache):
    """Every config the CPU lane's suites need, compiled once for sm_90 into the session cache."""
    from tiledispatch.testing import suites

    registry = td.Registry("sm_90")
    for cfg in suites.all_configs():
        registry.add(cfg)
    report = registry.build(max_workers=2)
    assert not report.failed, report.failed
    return registry


@pytest.fixture(scope="session")
def build_registry(universe):
    """Factory: a built sm_90 Registry holding exactly `configs` (served from the session cache); `sms`: the
    SM count its launch plans assume (default: the reference GPU's)."""

    def make(configs, sms=None, **kwargs) -> td.Registry:
        arch = td.get_arch("sm_90")
        registry = td.Registry(arch.with_device(sms, arch.reference_gpu) if sms else arch, **kwargs)
        for cfg in configs:
            registry.add(cfg)
        report = registry.build(max_workers=2)
        assert not report.failed, report.failed
        return registry

    return make
