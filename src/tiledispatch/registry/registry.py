"""Registry: declare instances, build them (parallel, cached), select one per problem and run it."""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tiledispatch import settings
from tiledispatch.arch.spec import ArchSpec, detect, get_arch
from tiledispatch.build import cache
from tiledispatch.build.compile import CompileResult, CompileTask
from tiledispatch.codegen.lint import check_source
from tiledispatch.codegen.render import render_source
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.conv_validity import check_conv_config, conv_config_errors
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.configs.validity import check_gemm_config, gemm_config_errors
from tiledispatch.errors import InvalidConfig, NoKernelFound, UnsupportedProblem
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.progress import progress_bar
from tiledispatch.registry.conv_kernel import ConvKernel
from tiledispatch.registry.kernel import Kernel, Support, build_epoch, launch_key
from tiledispatch.runtime.launcher import call_key, device_token, remember
from tiledispatch.select import selector
from tiledispatch.select.tuning_db import TuningDB


@dataclasses.dataclass
class BuildReport:
    built: list[str] = dataclasses.field(default_factory=list)
    cached: list[str] = dataclasses.field(default_factory=list)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return (f"{len(self.built)} built, {len(self.cached)} from cache, {len(self.failed)} failed "
                f"in {self.seconds:.2f} s")


class Registry:
    def __init__(self, arch: str | ArchSpec | None = None, *, cache_dir: str | Path | None = None,
                 tuning_db: str | Path | None = None) -> None:
        self._arch = get_arch(arch) if isinstance(arch, (str, int)) else arch
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._tuning_db_path = tuning_db
        self._tuning_db: TuningDB | None = None
        self._kernels: dict[str, Kernel] = {}
        self._memo: dict[tuple, Dispatch] = {}    # call_key + run options -> Dispatch (see run)
        self._select_memo: dict[tuple, Dispatch] = {}   # (problem, strategy, top_k, device) -> Dispatch
        self._sources: dict[str, str] = {}
        self.skipped: dict[str, str] = {}

    # -- declaration ------------------------------------------------------------------------------
    @property
    def arch(self) -> ArchSpec:
        if self._arch is None:
            self._arch = detect()
        return self._arch

    @property
    def cache_dir(self) -> Path:
        return self._cache_dir or settings.cache_dir()

    def add(self, config: GemmConfig | ConvConfig | str, source: str | None = None) -> Kernel:
        """Declare one instance (a config or its name); raises InvalidConfig if it cannot exist on this arch."""
        cfg = parse_name(config) if isinstance(config, str) else config
        if not isinstance(cfg, (GemmConfig, ConvConfig)):
            raise InvalidConfig(f"expected a GemmConfig, a ConvConfig or an instance name, got "
                                f"{type(config).__name__}", field="config")
        if isinstance(cfg, ConvConfig):
            check_conv_config(cfg, self.arch)
        else:
            check_gemm_config(cfg, self.arch)
        if cfg.name not in self._kernels:
            self._kernels[cfg.name] = (ConvKernel if cfg.op == "conv" else Kernel)(cfg, self.arch)
            if source is not None:
                self._sources[cfg.name] = source
        return self._kernels[cfg.name]

    def add_preset(self, name: str, epilogue: Epilogue | tuple[str, bool] | None = None) -> list[Kernel]:
        """Add a packaged preset; configs invalid on this arch are skipped and recorded in `skipped`.
        epilogue: an Epilogue for GEMM presets, (activation, bias) for conv presets."""
        from tiledispatch.presets import load_preset

        added = []
        for cfg in load_preset(name):
            if epilogue is not None:
                cfg = cfg.with_epilogue(*epilogue) if isinstance(cfg, ConvConfig) else cfg.with_epilogue(epilogue)
            errors = (conv_config_errors if isinstance(cfg, ConvConfig) else gemm_config_errors)(cfg, self.arch)
            if errors:
                self.skipped[cfg.name] = "; ".join(reason for _, reason in errors)
                continue
            added.append(self.add(cfg))
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
            raise NoKernelFound(f"no kernel named {name!r} in this registry ({len(self)} kernels)", field="kernel")
        return self._kernels[name]

    # -- building ---------------------------------------------------------------------------------
    def _task(self, kernel: Kernel) -> CompileTask:
        source = self._sources.get(kernel.name) or render_source(kernel.config)
        fp = cache.fingerprint(source, self.arch.name)
        return CompileTask(kernel.name, self.arch.name, self.arch.cc, fp, source, str(self.cache_dir))

    def build(self, max_workers: int | None = None, progress: bool | None = None) -> BuildReport:
        """Compile every declared instance not already in the cache, in spawned worker processes."""
        from tiledispatch.build.pool import run_tasks

        start = time.perf_counter()
        report = BuildReport()
        todo: list[CompileTask] = []
        for kernel in self.kernels:
            task = self._task(kernel)
            entry = task.entry
            existed = entry.exists()   # checked first: entries appear complete, by atomic rename
            if cache.read_entry(entry) is not None:
                kernel.entry_dir = entry
                report.cached.append(kernel.name)
                continue
            if existed:   # present before we read it, yet unreadable: corrupt or half-deleted, rebuild
                cache.remove_entry(entry)
            check_source(task.source, kernel.name)   # before compiling, once per cache miss: raises CodegenError
            todo.append(task)
        with progress_bar(f"building {len(todo)} kernels for {self.arch.name}", len(todo), progress) as advance:
            def done(result: CompileResult) -> None:
                if result.ok:
                    self._kernels[result.name].entry_dir = Path(result.path)
                    report.built.append(result.name)
                else:
                    report.failed[result.name] = result.reason
                advance()

            run_tasks(todo, max_workers or settings.max_workers(), done)
        report.seconds = time.perf_counter() - start
        return report

    # -- selection and running --------------------------------------------------------------------
    @property
    def tuning_db(self) -> TuningDB:
        if self._tuning_db is None:
            self._tuning_db = TuningDB(self.arch.name, self._tuning_db_path)
        return self._tuning_db

    def default_device(self):
        import torch

        from tiledispatch.arch.spec import cuda_available

        return torch.device("cuda", torch.cuda.current_device()) if cuda_available() else torch.device("cpu")

    @staticmethod
    def device_name(device) -> str:
        import torch

        return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu-interpreter"

    def is_supported(self, problem: GemmProblem) -> Support:
        """Whether some kernel computes `problem`, directly or on exactly padded operands (as `select` does)."""
        reasons = {k.name: k.is_supported(problem).reason for k in self.kernels}
        if any(not r for r in reasons.values()) or selector.plans_of(self.kernels, problem):
            return Support(True)
        if not reasons:
            return Support(False, "the registry is empty")
        return Support(False, _summarize(reasons))

    def candidates(self, problem: GemmProblem) -> list[Kernel]:
        return [k for k in self.kernels if k.built and k.is_supported(problem)]

    def plans(self, problem: GemmProblem) -> list[selector.Plan]:
        """Every built kernel that computes `problem` directly, then those that compute it exactly on padded
        operands (selector.plan_for: each on the least padding it supports), in registry order."""
        return selector.plans_of([k for k in self.kernels if k.built], problem)

    def select(self, problem: GemmProblem, strategy: str = "auto", top_k: int | None = selector.DEFAULT_TOP_K
               ) -> selector.Selection:
        """Pick a built kernel (run directly or on exactly padded operands) for `problem`. Every strategy but
        `tune` is remembered per (problem, strategy): a later select of the same problem is a lookup."""
        key = None if strategy == "tune" else (problem, strategy, top_k,
                                               device_token() if strategy == "auto" else None)
        hit = self._select_memo.get(key) if key is not None else None
        if hit is not None and hit.valid(self):
            return hit.selection_copy()
        plans = self.plans(problem)
        if plans:
            selection = selector.choose(self, plans, problem, strategy, top_k)
            if key is not None:
                entry = Dispatch(selection, None, self._state())
                remember(self._select_memo, key, entry)
                return entry.selection_copy()
            return selection
        if not any(k.built for k in self.kernels):
            raise NoKernelFound("no kernel of this registry is built; call build() first", field="registry")
        raise UnsupportedProblem(f"no kernel supports {problem.describe()}: "
                                 f"{_summarize({k.name: k.is_supported(problem).reason for k in self.kernels})}",
                                 field="problem")

    def run(self, problem: GemmProblem | None, a: Any, b: Any, *, strategy: str = "auto", out: Any = None,
            c: Any = None, bias: Any = None, bias_mode: str | None = None, d: tuple = (),
            activation: str | None = None, alpha: float = 1.0, beta: float = 0.0, out_dtype: str | None = None,
            allow_tf32: bool = False, scale_a: Any = None, scale_b: Any = None, return_selection: bool = False,
            **kwargs: Any) -> Any:
        """Select for the problem (derived from the tensors when None) and run; returns out, or (out, selection)
        with return_selection=True. The selection and launch of an argument signature are memoized (every
        strategy but `tune`); a later call of the same signature skips validation, derivation and selection."""
        if isinstance(problem, ConvProblem):
            return self.run_conv(problem, a, b, strategy=strategy, out=out, bias=bias,
                                 return_selection=return_selection, **kwargs)
        if beta != 0 and c is None:
            c = out   # BLAS semantics, as make_gemm_args
        options = (bias_mode, activation, out_dtype, allow_tf32, strategy, problem,
                   device_token() if strategy == "auto" else None)   # auto reads the current GPU's tuning DB
        key = None if kwargs or strategy == "tune" else call_key(a, b, out, c, bias, d, beta, scale_a, scale_b,
                                                                 options)
        entry = self._memo.get(key)
        if entry is not None and entry.bound is not None and entry.valid(self):
            result = entry.bound(a, b, out, c, bias, d, alpha, beta, scale_a, scale_b)
        else:
            fields = {"out": out, "c": c, "bias": bias, "bias_mode": bias_mode, "d": d, "activation": activation,
                      "alpha": alpha, "beta": beta, "out_dtype": out_dtype, "allow_tf32": allow_tf32,
                      "scale_a": scale_a, "scale_b": scale_b, **kwargs}
            result, entry = self.dispatch(key, problem, a, b, strategy, fields)
        return (result, entry.selection_copy()) if return_selection else result

    def run_conv(self, problem: ConvProblem, first: Any, second: Any, *, strategy: str = "auto", out: Any = None,
                 bias: Any = None, return_selection: bool = False) -> Any:
        """Run a convolution: (x, w) for fwd, (dy, w) for bwd_data, (x, dy) for bwd_weight; returns the
        written tensor (y, dx or dw; `out` receives it when given)."""
        from tiledispatch.runtime.conv_execute import execute_conv

        return execute_conv(self, problem, first, second, strategy=strategy, out=out, bias=bias,
                            return_selection=return_selection)

    def dispatch_conv(self, problem: ConvProblem, first: Any, second: Any, *, strategy: str, out: Any,
                      bias: Any) -> tuple[Any, Dispatch, bool]:
        """run_conv for td.conv*: (the written tensor, the decision, whether this registry remembered it)."""
        from tiledispatch.runtime.conv_execute import dispatch_conv

        return dispatch_conv(self, problem, first, second, strategy=strategy, out=out, bias=bias)

    def dispatch(self, key: tuple | None, problem: GemmProblem | None, a: Any, b: Any, strategy: str,
                 fields: dict[str, Any]) -> tuple[Any, Dispatch]:
        """A call that did not take a bound launch of its own memo (td.gemm's, or a stale one): a valid decision
        remembered here under `key` runs its bound launch; otherwise validate, select and run, and remember the
        decision with its bound launch under `key` (None: not remembered). A padded selection's bound launch is
        a PaddedLaunch (the copies into kept buffers, then the kernel's bound launch on them)."""
        from tiledispatch.runtime.execute import make_gemm_args, run_selection, select_for
        from tiledispatch.runtime.padding import PaddedLaunch

        entry = self._memo.get(key) if key is not None else None
        if entry is not None and entry.valid(self):
            f = fields
            return entry.bound(a, b, f["out"], f["c"], f["bias"], f["d"], f["alpha"], f["beta"], f["scale_a"],
                               f["scale_b"]), entry
        args = make_gemm_args(a, b, **fields)
        selection = select_for(self, problem, args, strategy)
        if selection.padded:
            bound = PaddedLaunch(selection, args)
            out = bound(args.a, args.b, args.out, args.c, args.bias, args.d, args.alpha, args.beta, args.scale_a,
                        args.scale_b)
        else:
            launch = launch_key(selection.problem, args)   # before the run, which fills in args.out
            out = run_selection(selection, args)
            bound = selection.kernel._launch_memo.get(launch) if launch is not None else None
        entry = Dispatch(selection, bound, self._state())
        if key is not None and bound is not None:
            remember(self._memo, key, entry)
        return out, entry

    def _state(self) -> tuple:
        """What a memoized selection depends on besides the arguments: the declared kernels, which are built
        (build_epoch), and the tuning DB's entries (`auto`)."""
        db = self._tuning_db
        return len(self._kernels), build_epoch(), db, db.entries if db is not None else None

    # -- serialization ----------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"format": 1, "arch": self.arch.name, "kernels": [k.name for k in self.kernels]},
                          indent=1)

    @classmethod
    def from_json(cls, text: str, **kwargs: Any) -> Registry:
        try:
            data = json.loads(text)
            arch, names = data["arch"], data["kernels"]
            if not isinstance(names, list):
                raise TypeError(f"'kernels' must be a list of instance names, got {type(names).__name__}")
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidConfig(f"registry JSON is malformed ({exc}); expected {{'arch', 'kernels'}}",
                                field="registry") from exc
        registry = cls(arch, **kwargs)
        for name in names:
            registry.add(name)
        return registry


@dataclasses.dataclass
class Dispatch:
    """A memoized decision of Registry.run: the selection and its bound launch (a PaddedLaunch when padded)."""

    selection: selector.Selection
    bound: Any
    state: tuple

    def valid(self, registry: Registry) -> bool:
        state, db = self.state, registry._tuning_db
        return (state[0] == len(registry._kernels) and state[1] == build_epoch() and state[2] is db
                and (db is None or state[3] is db.entries))

    def selection_copy(self) -> selector.Selection:
        s = self.selection
        return dataclasses.replace(s, notes=list(s.notes), ranking=list(s.ranking))


def _summarize(reasons: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons.values():
        key = reason.split(":", 1)[0] + ":" + reason.split(":", 1)[1][:80] if ":" in reason else reason
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    return "; ".join(f"{n} kernel(s) reject it ({r})" for r, n in top)


def registry_of(configs: Iterable[GemmConfig | str], arch: str | None = None, **kwargs: Any) -> Registry:
    registry = Registry(arch, **kwargs)
    for cfg in configs:
        registry.add(cfg)
    return registry
