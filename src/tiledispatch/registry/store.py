"""KernelStore: declare instances, build them (parallel, cached) and look them up: the Registry without its
call path (selection and runs live in dispatch/)."""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from tiledispatch import settings
from tiledispatch.arch.spec import ArchSpec, detect, get_arch
from tiledispatch.build import cache
from tiledispatch.bundle.active import current as active_bundle
from tiledispatch.bundle.active import strict as bundle_strict
from tiledispatch.bundle.manifest import Bundle
from tiledispatch.build.compile import CompileResult, CompileTask
from tiledispatch.codegen.lint import check_source
from tiledispatch.codegen.render import render_source
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.fields import raise_first_error
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.configs.vendor import VendorConfig
from tiledispatch.errors import (BundleError, InvalidConfig, InvalidConfigType, NoKernelFound,
                                 UnsupportedProblem)
from tiledispatch.kernels.family import config_errors
from tiledispatch.memo import Memo, Stamp, build_epoch
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.progress import progress_bar
from tiledispatch.registry.kernel import Kernel, Support, make_kernel
from tiledispatch.registry.vendor import VendorKernel
from tiledispatch.select.selector import Plan, plans_of
from tiledispatch.select.tuning_db import TuningDB

S = TypeVar("S", bound="KernelStore")
_LOG = logging.getLogger("tiledispatch")


@dataclasses.dataclass
class BuildReport:
    """What a build did per kernel: compiled (`built`), taken from the build cache (`cached`) or from the
    active bundle (`from_bundle`, see load_bundle), or failed (with the reason)."""

    built: list[str] = dataclasses.field(default_factory=list)
    cached: list[str] = dataclasses.field(default_factory=list)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    from_bundle: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        bundle = f", {len(self.from_bundle)} from the bundle" if self.from_bundle else ""
        return (f"{len(self.built)} built, {len(self.cached)} from cache, {len(self.failed)} failed{bundle} "
                f"in {self.seconds:.2f} s")


class KernelStore:
    """Declared kernels of one arch, their build state and the decisions remembered for them."""

    def __init__(self, arch: str | ArchSpec | None = None, *, cache_dir: str | Path | None = None,
                 tuning_db: str | Path | None = None) -> None:
        self._arch = get_arch(arch) if isinstance(arch, (str, int)) else arch
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._tuning_db_path = tuning_db
        self._tuning_db: TuningDB | None = None
        self._kernels: dict[str, Kernel] = {}
        self._sources: dict[str, str] = {}
        self._version = 0
        self._declared = 0   # changes when kernels are declared (a space ranking depends on nothing else)
        self._on_demand: set[str] = set()
        self.skipped: dict[str, str] = {}
        self.failed: dict[str, str] = {}   # kernel name -> why its last build failed
        self.compiled_on_demand: dict[str, float] = {}   # kernel name -> seconds its first use waited for it
        # (problem, ...) -> (declared version, ranking of the space): see dispatch/space.py
        self.rankings: Memo[Any] = Memo()
        self.calls: Memo[Any] = Memo()        # Registry.run: argument signature -> dispatch.Decision
        # Registry.select: (problem, strategy, top_k, device) -> Decision
        self.selections: Memo[Any] = Memo()

    # -- declaration ------------------------------------------------------------------------------
    @property
    def arch(self) -> ArchSpec:
        if self._arch is None:
            self._arch = detect()
        return self._arch

    @property
    def cache_dir(self) -> Path:
        return self._cache_dir or settings.cache_dir()

    def add(self, config: GemmConfig | ConvConfig | VendorConfig | str, source: str | None = None, *,
            on_demand: bool = False) -> Kernel:
        """Declare one instance (a config or its name); raises InvalidConfig if it cannot exist on this arch.
        A VendorConfig declares the vendor library's plan (nothing to build). on_demand=True declares it as
        part of the space `auto` ranks: `build()` leaves it out, the first selection that picks it compiles
        it (see compile_on_demand); declaring it again without the flag makes it part of the built set."""
        cfg = parse_name(config) if isinstance(config, str) else config
        if not isinstance(cfg, (GemmConfig, ConvConfig, VendorConfig)):
            raise InvalidConfigType("expected a GemmConfig, a ConvConfig, a VendorConfig or an instance "
                                    f"name, got {type(config).__name__}", field="config")
        if not isinstance(cfg, VendorConfig):   # a vendor plan is valid once constructed, on every arch
            raise_first_error(cfg, config_errors(cfg, self.arch))
        if cfg.name not in self._kernels:
            self._kernels[cfg.name] = (VendorKernel(cfg, self.arch) if isinstance(cfg, VendorConfig)
                                       else make_kernel(cfg, self.arch))
            self._version += 1
            self._declared += 1
            if source is not None:
                self._sources[cfg.name] = source
            if on_demand and not isinstance(cfg, VendorConfig):
                self._on_demand.add(cfg.name)
        elif not on_demand and cfg.name in self._on_demand:
            self._on_demand.discard(cfg.name)
            self._version += 1
            self._declared += 1
        return self._kernels[cfg.name]

    @property
    def on_demand(self) -> list[Kernel]:
        """The kernels declared on demand (the space beyond the built set), built or not."""
        return [k for name, k in self._kernels.items() if name in self._on_demand]

    def is_on_demand(self, name: str) -> bool:
        """Whether the kernel `name` was declared on demand (part of the space beyond the built set)."""
        return name in self._on_demand

    def add_preset(self, name: str, epilogue: Epilogue | tuple[str, bool] | None = None, *,
                   on_demand: bool = False) -> list[Kernel]:
        """Add a packaged preset; configs invalid on this arch are skipped and recorded in `skipped`.
        epilogue: an Epilogue for GEMM presets, (activation, bias) for conv presets. on_demand=True: the
        preset's configs not declared yet join the space compiled on demand (see `add`)."""
        from tiledispatch.presets import load_preset

        added = []
        for cfg in load_preset(name):
            if isinstance(cfg, ConvConfig) and isinstance(epilogue, tuple):
                cfg = cfg.with_epilogue(*epilogue)
            elif isinstance(cfg, GemmConfig) and isinstance(epilogue, Epilogue):
                cfg = cfg.with_epilogue(epilogue)
            elif epilogue is not None:
                raise InvalidConfig(f"epilogue for preset {name!r} must be an Epilogue (GEMM) or "
                                    f"(activation, bias) (conv), got {epilogue!r}", field="epilogue")
            errors = config_errors(cfg, self.arch)
            if errors:
                self.skipped[cfg.name] = "; ".join(reason for _, reason in errors)
                continue
            added.append(self.add(cfg, on_demand=on_demand))
        return added

    def add_codegen_output(self, path: str | Path) -> list[Kernel]:
        """Add the instances a `tiledispatch codegen` run wrote; those files are what build compiles."""
        from tiledispatch.codegen.writer import read_manifest

        _, rows = read_manifest(path)
        return [self.add(cfg, source) for cfg, source in rows]

    @property
    def kernels(self) -> list[Kernel]:
        return list(self._kernels.values())

    def __len__(self) -> int:
        return len(self._kernels)

    def __iter__(self) -> Iterator[Kernel]:
        return iter(self.kernels)

    def get(self, name: str) -> Kernel:
        if name not in self._kernels:
            parse_name(name)  # a malformed name raises InvalidConfig rather than NoKernelFound
            raise NoKernelFound(f"no kernel named {name!r} in this registry ({len(self)} kernels)",
                                field="kernel")
        return self._kernels[name]

    # -- building ---------------------------------------------------------------------------------
    def _task(self, kernel: Kernel) -> CompileTask:
        source = self._sources.get(kernel.name) or render_source(kernel.config)
        fp = cache.fingerprint(source, self.arch.name)
        return CompileTask(kernel.name, self.arch.name, self.arch.cc, fp, source, str(self.cache_dir))

    def build(self, max_workers: int | None = None, progress: bool | None = None) -> BuildReport:
        """Compile every declared instance not already in the cache, in spawned worker processes; kernels
        declared on demand are left to the selections that pick them (compile_on_demand)."""
        kernels = [k for k in self.kernels if k.name not in self._on_demand or k.built]
        return self._build(kernels, max_workers, progress, "building {n} kernels")

    def compile_on_demand(self, kernels: list[Kernel], progress: bool | None = None) -> BuildReport:
        """Build these kernels now (from the cache when it holds them), in parallel: what a selection does
        with the unbuilt plans it picked. Failures are recorded in `failed` (and returned), never raised; an
        unusable cache raises CacheError."""
        todo = [k for k in kernels if not k.built]
        report = self._build(todo, None, progress, "compiling {n} picked kernels on demand", keep=True)
        for name in report.built + report.cached + report.from_bundle:
            self.compiled_on_demand[name] = report.seconds
        return report

    def _build(self, kernels: list[Kernel], max_workers: int | None, progress: bool | None,
               what: str, keep: bool = False) -> BuildReport:
        from tiledispatch.build.pool import run_tasks

        start = time.perf_counter()
        report = BuildReport()
        todo: list[CompileTask] = []
        bundle = active_bundle()
        layer = bundle if bundle is not None and bundle.arch == self.arch.name else None
        for kernel in kernels:
            if isinstance(kernel, VendorKernel):   # the vendor library: nothing to compile
                continue
            task = self._task(kernel)
            if layer is not None and self._from_bundle(kernel, task, layer):
                report.from_bundle.append(kernel.name)
                continue
            entry = task.entry
            existed = entry.exists()   # checked first: entries appear complete, by atomic rename
            if cache.read_entry(entry) is not None:
                kernel.entry_dir = entry
                self.failed.pop(kernel.name, None)
                report.cached.append(kernel.name)
                continue
            if existed:   # present before we read it, yet unreadable: corrupt or half-deleted, rebuild
                cache.remove_entry(entry)
            # before compiling, once per cache miss: raises CodegenError
            check_source(task.source, kernel.name)
            todo.append(task)
        if bundle is not None and todo:
            _compiling_beside(bundle, [task.name for task in todo])
        what = (what.format(n=len(todo)) + f" for {self.arch.name} into {self.cache_dir} "
                "(cached for later runs)")
        with progress_bar(what, len(todo), progress) as advance:
            def done(result: CompileResult) -> None:
                if result.ok:
                    self._kernels[result.name].entry_dir = Path(result.path)
                    self.failed.pop(result.name, None)
                    report.built.append(result.name)
                else:
                    report.failed[result.name] = result.reason
                    self.failed[result.name] = result.reason
                advance()

            run_tasks(todo, max_workers or settings.max_workers(), done, keep=keep)
        self._version += 1
        report.seconds = time.perf_counter() - start
        return report

    def _from_bundle(self, kernel: Kernel, task: CompileTask, bundle: Bundle) -> bool:
        """Point `kernel` at the bundle's entry of its fingerprint, if the bundle holds one (never written to:
        a corrupt entry there is an error, not a rebuild)."""
        entry = bundle.entry(kernel.name, task.fingerprint)
        if entry is None:
            return False
        if cache.read_entry(entry) is None:
            raise BundleError(f"bundle {bundle.path}: the entry of {kernel.name} is corrupt or incomplete "
                              "(modified after it was loaded?)", field="files")
        if kernel.entry_dir != entry:
            kernel.entry_dir = entry
        self.failed.pop(kernel.name, None)
        bundle.served += 1
        return True

    # -- lookup ---------------------------------------------------------------------------------------
    @property
    def tuning_db(self) -> TuningDB:
        if self._tuning_db is None:
            self._tuning_db = TuningDB(self.arch.name, self._tuning_db_path)
        return self._tuning_db

    def default_device(self) -> Any:
        """The current CUDA device, else the CPU (Triton's interpreter)."""
        import torch

        from tiledispatch.arch.spec import cuda_available

        return torch.device("cuda", torch.cuda.current_device()) if cuda_available() else torch.device("cpu")

    @staticmethod
    def device_name(device: Any) -> str:
        import torch

        return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu-interpreter"

    def stamp(self) -> Stamp:
        """What a decision remembered for this registry depends on (see memo.Stamp)."""
        db = self._tuning_db
        return tuple.__new__(Stamp, (self._version, build_epoch(), -1 if db is None else db.version))

    def plans(self, problem: GemmProblem | ConvProblem) -> list[Plan]:
        """Every built kernel that computes `problem` directly, then those that compute it exactly on padded
        operands (selector.plan_for: each on the least padding it supports), in registry order."""
        return plans_of([k for k in self.kernels if k.built], problem)

    def space_plans(self, problem: GemmProblem | ConvProblem) -> list[Plan]:
        """The plans of the whole declared space: every declared kernel, built or not (on demand, or not built
        yet), whose build has not failed, by the same rule as `plans` (selector.plan_for: the kernel
        family's validity predicate decides for built and unbuilt kernels alike)."""
        return plans_of([k for k in self.kernels if k.built or k.name not in self.failed], problem)

    def declared_version(self) -> int:
        """Changes whenever a kernel is declared (or moves between the built set and the space)."""
        return self._declared

    def is_supported(self, problem: GemmProblem | ConvProblem) -> Support:
        """Whether some kernel computes `problem`, directly or on exactly padded operands (as `select`
        does)."""
        reasons = {k.name: k.is_supported(problem).reason for k in self.kernels}
        if any(not r for r in reasons.values()) or plans_of(self.kernels, problem):
            return Support(True)
        if not reasons:
            return Support(False, "the registry is empty")
        return Support(False, summarize(reasons))

    def unsupported(self, problem: GemmProblem | ConvProblem) -> Exception:
        """The error for a problem no built kernel runs (NoKernelFound when none is built)."""
        if not any(k.built for k in self.kernels):
            return NoKernelFound("no kernel of this registry is built; call build() first", field="registry")
        reasons = {k.name: k.is_supported(problem).reason for k in self.kernels}
        return UnsupportedProblem(f"no kernel supports {problem.describe()}: {summarize(reasons)}",
                                  field="problem")

    # -- serialization ----------------------------------------------------------------------------
    def to_json(self) -> str:
        data: dict[str, Any] = {"format": 1, "arch": self.arch.name,
                                "kernels": [k.name for k in self.kernels if k.name not in self._on_demand]}
        if self._on_demand:
            data["on_demand"] = [k.name for k in self.on_demand]
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls: type[S], text: str, **kwargs: Any) -> S:
        try:
            data = json.loads(text)
            arch, names, lazy = data["arch"], data["kernels"], data.get("on_demand", [])
            for field, value in (("kernels", names), ("on_demand", lazy)):
                if not isinstance(value, list):
                    raise TypeError(f"'{field}' must be a list of instance names, got {type(value).__name__}")
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidConfig(f"registry JSON is malformed ({exc}); expected {{'arch', 'kernels'}}",
                                field="registry") from exc
        registry = cls(arch, **kwargs)
        for name in names:
            registry.add(name)
        for name in lazy:
            registry.add(name, on_demand=True)
        return registry


def _compiling_beside(bundle: Bundle, names: list[str]) -> None:
    """A bundle is active yet these kernels must compile (it lacks them): raise when strict, else warn."""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    why = (f"the bundle {bundle.path} ({bundle.arch}) lacks {len(names)} kernel(s) this build needs: {shown}")
    if bundle_strict():
        raise BundleError(f"{why}; a strict bundle compiles nothing (export them too, or load it with "
                          "strict=False / TILEDISPATCH_BUNDLE_STRICT=0)", field="kernel")
    _LOG.warning("%s; compiling them (the build cache keeps them)", why)


def summarize(reasons: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons.values():
        key = reason.split(":", 1)[0] + ":" + reason.split(":", 1)[1][:80] if ":" in reason else reason
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    return "; ".join(f"{n} kernel(s) reject it ({r})" for r, n in top)
