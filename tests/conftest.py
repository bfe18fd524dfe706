"""Test configuration shared by every lane.

- markers (declared in pyproject.toml): `gpu` (skipped without a CUDA device) and `slow` (long CPU-lane tests,
  left out by default through pyproject's addopts; `-m slow` runs only them, `-m ""` everything);
- the session's temporary files (pytest's tmp_path dirs, the build cache, Triton's cache, TMPDIR of the build
  workers) live in one private directory, removed when the session ends (unless --basetemp names one);
- the whole session uses a private TILEDISPATCH_CACHE_DIR (and Triton cache), never ~/.cache; tests that need
  a clean cache point TILEDISPATCH_CACHE_DIR at their own tmp_path with monkeypatch; `--td-session-cache DIR`
  keeps its compiled kernels in DIR for a later session;
- a fixed torch seed per test;
- `build_registry(configs)`: a Registry of the given configs, built (max_workers=2). In a session with
  default-lane tests, the first call compiles every config of the CPU lane's suites at once (one worker pool),
  later calls are served from the cache.
- `prebuild`: one compile worker beside the tests, started with the session: it compiles, in test order, the
  universe, the small default kernels and the instances that modules declare through a module-level
  `prebuild_registries(items, load_script)`, on the core that a test running the interpreter leaves idle;
  `build_registry` (and a module building otherwise) claims its share before it builds (see Prebuild).
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
from tiledispatch.configs.vendor import VENDOR_FAMILY
from tiledispatch.testing import small_defaults as small

_TEMP_KEY = pytest.StashKey[tuple]()
ISOLATED_ENV = ("TILEDISPATCH_TUNING_DB", "TILEDISPATCH_INTERPRET", "TILEDISPATCH_MAX_WORKERS", "TILEDISPATCH_ARCH",
                "TILEDISPATCH_RANK_SPACE", "TILEDISPATCH_BUNDLE", "TILEDISPATCH_BUNDLE_STRICT",
                "TILEDISPATCH_VENDOR", "TILEDISPATCH_VENDOR_MARGIN")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--td-session-cache", default=None, metavar="DIR",
                     help="keep the session's build cache (and Triton's) in DIR and reuse it in later "
                          "sessions (default: a private directory removed at the end)")


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
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config):
    """Point the build cache, tuning DB and Triton's cache at a session tmp dir (or --td-session-cache);
    clear env overrides."""
    kept = pytestconfig.getoption("--td-session-cache")
    root = Path(kept).resolve() if kept else tmp_path_factory.mktemp("tiledispatch-cache")
    root.mkdir(parents=True, exist_ok=True)
    for child in root.iterdir():   # a kept cache keeps compiled kernels only: no tuning DB, no other state
        if child.name.startswith("sm_") or child.name in (".triton", ".triton-main"):
            continue
        if child.is_dir():
            shutil.rmtree(child)
        else:
            child.unlink()
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


class Prebuild:
    """Compile tasks handed one at a time to one spawned worker (build.pool's worker set-up), in the order of
    the modules that declared them. Nothing the tests check changes: a test still builds its registries, which
    find these instances in the session cache (a failed compile leaves no entry: the test's build compiles it
    again and reports it)."""

    def __init__(self, tasks: dict[str, list]) -> None:
        import collections
        import threading

        self.lock = threading.Lock()
        self.queue = collections.deque((module, task) for module, group in tasks.items() for task in group)
        self.running = None   # (module, kernel name, future) of the task the worker has
        self.executor = None
        if not self.queue:
            return
        from concurrent.futures import ProcessPoolExecutor
        import multiprocessing

        from tiledispatch.build import cache, pool

        root = Path(self.queue[0][1].cache_root)
        cache.ensure_root(root)
        self.executor = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=pool._init_worker,
                                            initargs=(str(root / ".triton"), os.getpid()))
        self._next()

    def _next(self, _done=None) -> None:
        from tiledispatch.build import cache
        from tiledispatch.build.compile import run_task

        with self.lock:
            self.running = None
            while self.queue and cache.read_entry(self.queue[0][1].entry) is not None:   # built meanwhile
                self.queue.popleft()
            if not self.queue or self.executor is None:
                return
            module, task = self.queue.popleft()
            try:
                future = self.executor.submit(run_task, task)
            except RuntimeError:   # shut down
                return
            self.running = (module, task.name, future)
        future.add_done_callback(self._next)

    def claim(self, module: str) -> None:
        """Before `module` builds: its instances not started yet are left to the module's own build (two
        workers); the one compiling now is waited for."""
        self._claim(lambda m, name: m == module)

    def claim_kernels(self, names) -> None:
        """claim for a build of these kernels, whichever module declared them."""
        names = set(names)
        self._claim(lambda m, name: name in names)

    def _claim(self, mine) -> None:
        with self.lock:
            self.queue = type(self.queue)(entry for entry in self.queue if not mine(entry[0], entry[1].name))
            running = self.running
        if running is not None and mine(running[0], running[1]):
            running[2].exception()   # waits; a failure is the test's build's to report

    def close(self) -> None:
        with self.lock:
            self.queue.clear()
            executor, self.executor = self.executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


UNIVERSE, SMALL = "conftest:universe", "conftest:small"


@pytest.fixture(scope="session", autouse=True)
def prebuild(isolated_cache, load_script, request):
    """The session's Prebuild, in the order of the selected tests' first uses: the universe and the small
    default registries (when the session builds them), and per module that defines `prebuild_registries(items,
    load_script)` (its selected items -> registries, or lists of configs for sm_90, whose kernels it will
    build) those kernels; modules with PREBUILD_FIRST set (single compiles longer than a module's own pool
    would take for the rest) ahead of the others."""
    items = request.session.items
    tasks: dict[str, list] = {}
    seen: set[tuple[str, str]] = set()

    def declare(key: str, registries) -> None:
        tasks[key] = group = []
        for registry in registries:
            if not isinstance(registry, td.Registry):   # a list of configs
                registry = _sm90(registry)
            for kernel in registry.kernels:
                if kernel.config.family == VENDOR_FAMILY:
                    continue
                task = registry._task(kernel)
                if (task.name, task.fingerprint) not in seen:
                    seen.add((task.name, task.fingerprint))
                    group.append(task)

    modules = {}
    with_universe = _universe_wanted(items)
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if with_universe and "universe" in fixtures and UNIVERSE not in tasks:
            declare(UNIVERSE, [_universe_registry()])
        if "small_registries" in fixtures and SMALL not in tasks:
            declare(SMALL, [_small_universe()])
        module = getattr(item, "module", None)
        if module is None or module.__name__ in tasks:
            continue
        hook = getattr(module, "prebuild_registries", None)
        mine = [other for other in items if getattr(other, "module", None) is module]
        try:
            declared = hook(mine, load_script) if callable(hook) else []
        except Exception:   # e.g. a script it loads is broken: the module's own tests say so, not the session
            declared = []
        declare(module.__name__, declared)
        modules[module.__name__] = module
    first = [key for key in tasks if getattr(modules.get(key), "PREBUILD_FIRST", False)]
    background = Prebuild({key: tasks[key] for key in [*first, *(key for key in tasks if key not in first)]})
    yield background
    background.close()


def _universe_wanted(items) -> bool:
    """A session whose users of `universe` are all slow tests leaves it empty (see universe)."""
    users = [item for item in items if "universe" in getattr(item, "fixturenames", ())]
    return bool(users) and not all(item.get_closest_marker("slow") for item in users)


def _small_universe() -> td.Registry:
    """The kernels small.registries(SMALL_DEFAULT_KEYS) builds, in one registry."""
    registry = td.Registry()
    for key in dict.fromkeys(SMALL_DEFAULT_KEYS):
        registry.add(small.config(key))
    return registry


def _sm90(configs) -> td.Registry:
    registry = td.Registry("sm_90")
    for cfg in configs:
        registry.add(cfg)
    return registry


def _universe_registry() -> td.Registry:
    from tiledispatch.testing import suites

    return _sm90(suites.all_configs())


@pytest.fixture(scope="session")
def universe(isolated_cache, prebuild, request):
    """Every config the CPU lane's suites need, compiled once for sm_90 into the session cache (one pool),
    where a default-lane test uses them. A session whose users of it are all slow tests (the slow lane needs
    a handful of the ~84 configs) leaves it empty: `build_registry` then compiles what each test asks for."""
    if not _universe_wanted(request.session.items):
        return td.Registry("sm_90")
    prebuild.claim(UNIVERSE)
    registry = _universe_registry()
    report = registry.build(max_workers=2)
    assert not report.failed, report.failed
    return registry


@pytest.fixture(scope="session")
def build_registry(universe, prebuild):
    """Factory: a built sm_90 Registry holding exactly `configs` (served from the session cache); `sms`: the
    SM count its launch plans assume (default: the reference GPU's); the session's prebuild worker's share
    of them is claimed first."""

    def make(configs, sms=None, **kwargs) -> td.Registry:
        arch = td.get_arch("sm_90")
        registry = td.Registry(arch.with_device(sms, arch.reference_gpu) if sms else arch, **kwargs)
        for cfg in configs:
            registry.add(cfg)
        prebuild.claim_kernels([kernel.name for kernel in registry.kernels])
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
def small_registries(isolated_cache, prebuild):
    """The small registry of every key of SMALL_DEFAULT_KEYS, compiled once for the session (one pool)."""
    prebuild.claim(SMALL)
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
