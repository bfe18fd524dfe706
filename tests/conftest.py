"""Test configuration shared by every lane.

- markers (declared in pyproject.toml): `gpu` (skipped without a CUDA device) and `slow` (long CPU-lane tests,
  left out by default through pyproject's addopts; `-m slow` runs only them, `-m ""` everything);
- the session's temporary files (pytest's tmp_path dirs, the build cache, Triton's cache, TMPDIR of the build
  workers) live in one private directory, removed when the session ends (unless --basetemp names one);
- the whole session uses a private TILEDISPATCH_CACHE_DIR (and Triton cache), never ~/.cache; tests that need
  a clean cache point TILEDISPATCH_CACHE_DIR at their own tmp_path with monkeypatch;
- a fixed torch seed per test;
- `build_registry(configs)`: a Registry of the given configs, built (max_workers=2). In a session with
  default-lane tests, the first call compiles every config of the CPU lane's suites at once (one worker pool),
  later calls are served from the cache.
- `small_defaults`: td.gemm / td.conv* (and the modules and ops on them) run on small default registries, one
  small kernel per key of SMALL_DEFAULT_KEYS (tiledispatch.testing.small_defaults), instead of building the
  essential presets (20-35 s per key on 2 cores); for tests of what runs on the defaults, not of the selection
  over the real presets.

TRITON_INTERPRET is deliberately left alone: tiledispatch runs CPU tensors through the interpreter by itself and
its build workers must compile.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import tiledispatch as td
from tiledispatch.testing import small_defaults as small

_TEMP_KEY = pytest.StashKey[tuple]()
ISOLATED_ENV = ("TILEDISPATCH_TUNING_DB", "TILEDISPATCH_INTERPRET", "TILEDISPATCH_MAX_WORKERS", "TILEDISPATCH_ARCH",
                "TILEDISPATCH_RANK_SPACE", "TILEDISPATCH_BUNDLE", "TILEDISPATCH_BUNDLE_STRICT",
                "TILEDISPATCH_VENDOR", "TILEDISPATCH_VENDOR_MARGIN")


@pytest.hookimpl(tryfirst=True)    # before pytest's tmpdir plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    _private_temp_dir(config)
    # Triton 3.6's interpreter warns on every scalar conversion (NumPy >= 1.25) and on exp overflow in
    # saturating activations (exp(-x) -> inf gives the correct limit); recording ~10^4 warnings costs minutes.
    config.addinivalue_line("filterwarnings", "ignore:Conversion of an array with ndim > 0:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:overflow encountered in exp:RuntimeWarning")


def _private_temp_dir(config: pytest.Config) -> None:
    """One directory for everything the session writes to temp: TMPDIR (Triton's compiler files in this process
    and in build workers, Ray's session) and pytest's base temp dir inside it. Its path stays short: Ray's
    socket paths under it must fit in 107 bytes."""
    if config.option.basetemp is not None:
        return
    root = tempfile.mkdtemp(prefix="td-tests-")
    config.option.basetemp = os.path.join(root, "pytest")
    config.stash[_TEMP_KEY] = (root, os.environ.get("TMPDIR"), tempfile.tempdir)
    os.environ["TMPDIR"] = tempfile.tempdir = root


def pytest_unconfigure(config: pytest.Config) -> None:
    if _TEMP_KEY not in config.stash:
        return
    root, tmpdir, tempdir = config.stash[_TEMP_KEY]
    if tmpdir is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = tmpdir
    tempfile.tempdir = tempdir
    shutil.rmtree(root, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def load_script():
    """Import a script of the repository (`tools/x.py`, `benchmarks/y.py`) as a module; it is registered in
    sys.modules while it runs (dataclasses look their module up while the class is created)."""
    root = Path(__file__).resolve().parents[1]

    def load(relative: str, name: str | None = None):
        path = root / relative
        spec = importlib.util.spec_from_file_location(name or path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules[spec.name]
        return module
    return load


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
def universe(isolated_cache, request):
    """Every config the CPU lane's suites need, compiled once for sm_90 into the session cache (one pool),
    where a default-lane test uses them. A session whose users of it are all slow tests (the slow lane needs
    a handful of the ~84 configs) leaves it empty: `build_registry` then compiles what each test asks for."""
    from tiledispatch.testing import suites

    registry = td.Registry("sm_90")
    users = [item for item in request.session.items if "universe" in getattr(item, "fixturenames", ())]
    if users and all(item.get_closest_marker("slow") for item in users):
        return registry
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


# The default-registry keys the tests on `small_defaults` use (tests/nn, tests/ops, the conv API fuzz): fp32
# modules and ops and fp16 convs of every direction and ndim, the fused epilogues tested, fp16 / fp8 GEMMs.
SMALL_DEFAULT_KEYS = (
    *(small.conv_key(direction, dtype, ndim) for dtype in ("fp32", "fp16")
      for direction in ("fwd", "bwd_data", "bwd_weight") for ndim in (1, 2, 3)),
    small.conv_key("fwd", "fp32", 1, bias=True),
    small.conv_key("fwd", "fp32", 2, bias=True),
    small.conv_key("fwd", "fp32", 2, "relu", bias=True),
    small.conv_key("fwd", "fp32", 2, "gelu", bias=True),
    *(small.gemm_key("fp32", layout) for layout in ("rcr", "rrr", "crr")),
    small.gemm_key("fp32", "rcr", bias="col"),
    small.gemm_key("fp16", "rcr"),
    small.gemm_key("fp8e4m3", "rcr"),
)


@pytest.fixture(scope="session")
def small_registries(isolated_cache):
    """The small registry of every key of SMALL_DEFAULT_KEYS, compiled once for the session (one pool)."""
    return small.registries(SMALL_DEFAULT_KEYS)


@pytest.fixture
def small_defaults(small_registries):
    """The small registries installed as the default registries for one test; afterwards every default is
    forgotten (later tests build the real presets again, from the cache). A test that reached a default
    registry outside SMALL_DEFAULT_KEYS (the real preset, built for it) fails here: add the key."""
    from tiledispatch.dispatch import defaults

    defaults.reset()
    small.install(small_registries)
    yield small_registries
    built = set(defaults.registries()) - set(small_registries)
    defaults.reset()
    assert not built, f"built real default registries {sorted(map(str, built))}: add to SMALL_DEFAULT_KEYS"
