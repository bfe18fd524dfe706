"""Kernel: one built instance of a GemmConfig for an arch."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.configs.validity import gemm_problem_mismatch
from tiledispatch.dtypes import torch_dtype
from tiledispatch.errors import BadInput, NoKernelFound, UnsupportedProblem
from tiledispatch.kernels import family_module
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
from tiledispatch.runtime.launcher import (BoundLaunch, bind, call_key, cuda_runtime, remember, sm_count,
                                           uses_interpreter)


@dataclasses.dataclass(frozen=True)
class Support:
    """Truthy when supported; `reason` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    def __iter__(self):
        return iter((self.ok, self.reason))


_EPOCH = [0]   # bumped whenever any Kernel is pointed at another cache entry (selections may change)


def build_epoch() -> int:
    """Changes whenever a kernel's built state changes; memoized selections compare it."""
    return _EPOCH[0]


class Kernel:
    def __init__(self, config: GemmConfig, arch: ArchSpec, entry_dir: Path | None = None) -> None:
        self.config = config
        self.arch = arch
        self._entry_dir = entry_dir
        self._launchers: list | None = None
        self._run_memo: dict = {}      # call_key of run() -> BoundLaunch
        self._launch_memo: dict = {}   # (problem, call_key of the GemmArgs) -> BoundLaunch

    @property
    def entry_dir(self) -> Path | None:
        return self._entry_dir

    @entry_dir.setter
    def entry_dir(self, value: Path | None) -> None:
        """Pointing the kernel at another cache entry drops what was loaded or memoized from the old one."""
        self._entry_dir = value
        self._launchers = None
        self._run_memo.clear()
        self._launch_memo.clear()
        _EPOCH[0] += 1

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def built(self) -> bool:
        return self.entry_dir is not None

    def instance_string(self) -> str:
        return self.config.name

    def __repr__(self) -> str:
        state = "built" if self.built else "not built"
        return f"Kernel({self.name}, {self.arch.name}, {state})"

    def is_supported(self, problem: GemmProblem) -> Support:
        reason = gemm_problem_mismatch(self.config, problem)
        return Support(reason is None, reason or "")

    def _launchers_or_raise(self) -> list:
        if self.entry_dir is None:
            raise NoKernelFound(f"kernel {self.name} is not built; call Registry.build() first", field="kernel")
        if self._launchers is None:
            from tiledispatch.runtime.launcher import load_launchers

            self._launchers = load_launchers(self.entry_dir)
        return self._launchers

    def run(self, a: Any, b: Any, *, out: Any = None, c: Any = None, bias: Any = None, d: tuple = (),
            alpha: float = 1.0, beta: float = 0.0, out_dtype: str | None = None, allow_tf32: bool | None = None,
            scale_a: Any = None, scale_b: Any = None) -> Any:
        """Compute this instance's GEMM (with its fused epilogue) on torch tensors; returns `out`.
        scale_a / scale_b: one-element float32 tensors scaling fp8 operands (None: 1).

        The first call of an argument signature validates and binds the launch; later calls of the same
        signature (launcher.call_key) go straight to the bound launch."""
        key = call_key(a, b, out, c, bias, d, beta, scale_a, scale_b, (out_dtype, allow_tf32))
        bound = self._run_memo.get(key)
        if bound is None:
            cfg = self.config
            args = GemmArgs(a, b, out, c, bias, cfg.bias if bias is not None else "none", tuple(d), alpha, beta,
                            cfg.activation, out_dtype or cfg.out_dtype,
                            cfg.dtype == "tf32" if allow_tf32 is None else allow_tf32, scale_a=scale_a,
                            scale_b=scale_b)
            return self._first_run(key, args)
        return bound(a, b, out, c, bias, d, alpha, beta, scale_a, scale_b)

    def _first_run(self, key: tuple | None, args: GemmArgs) -> Any:
        cfg = self.config
        problem = problem_from_args(args, prefer_layout=cfg.layout)
        support = self.is_supported(problem)
        if not support:
            raise UnsupportedProblem(f"{self.name} cannot run {problem.describe()}: {support.reason}",
                                     field=support.reason.split(":", 1)[0])
        bound = self.bound_launch(args, problem)
        if key is not None and bound.reusable:
            remember(self._run_memo, key, bound)
        return bound(args.a, args.b, args.out, args.c, args.bias, args.d, args.alpha, args.beta, args.scale_a,
                     args.scale_b)

    def launch(self, args: GemmArgs, problem: GemmProblem) -> Any:
        """Launch on prepared arguments (problem already validated against this kernel); returns args.out."""
        bound = self.bound_launch(args, problem)
        args.out = bound(args.a, args.b, args.out, args.c, args.bias, args.d, args.alpha, args.beta, args.scale_a,
                         args.scale_b)
        return args.out

    def bound_launch(self, args: GemmArgs, problem: GemmProblem) -> BoundLaunch:
        """The launch of `problem` on arguments of this signature, memoized (binding allocates args.out when it
        is None: its strides are part of the launch)."""
        key = launch_key(problem, args)
        bound = self._launch_memo.get(key)
        if bound is None:
            bound = self._bind(args, problem)
            if key is not None and bound.reusable:
                remember(self._launch_memo, key, bound)
        return bound

    def _bind(self, args: GemmArgs, problem: GemmProblem) -> BoundLaunch:
        import torch

        launchers = self._launchers_or_raise()
        cfg, m, n, k = self.config, problem.m, problem.n, problem.k
        device = args.a.device
        _check_device_arch(device, self.arch)
        shape = (problem.batch, m, n) if max(args.a.dim(), args.b.dim()) == 3 else (m, n)
        dtype = torch_dtype(problem.out_dtype)
        if args.out is None:
            args.out = torch.empty(shape, dtype=dtype, device=device)
        plan = family_module(cfg).launch_plan(cfg, m, n, k, problem.batch, _sm_count(device, self.arch))
        return bind(launchers, plan, args, (m, n, k), shape, dtype, cfg.acc_dtype == "int32")


def launch_key(problem: GemmProblem, args: GemmArgs) -> tuple | None:
    """call_key of prepared arguments: every GemmArgs field but alpha and beta's value is part of it."""
    extra = tuple(getattr(args, name) for name in _OPTION_FIELDS)
    key = call_key(args.a, args.b, args.out, args.c, args.bias, args.d, args.beta, args.scale_a, args.scale_b,
                   extra)
    return None if key is None else (problem, key)


_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(GemmArgs)
                       if f.name not in ("a", "b", "out", "c", "bias", "d", "alpha", "beta", "scale_a", "scale_b"))


def _sm_count(device, arch: ArchSpec) -> int:
    """Streaming multiprocessors of the device (the arch's count on the interpreter): persistent grids."""
    if uses_interpreter(device):
        return arch.sm_count
    return sm_count(device.index if device.index is not None else cuda_runtime().get_device())


def _check_device_arch(device, arch: ArchSpec) -> None:
    if uses_interpreter(device):
        return
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if major * 10 + minor != arch.cc:
        raise BadInput(f"kernel built for {arch.name} cannot run on a sm_{major}{minor} device; build the registry "
                       f"with gpu_target='sm_{major}{minor}'", field="gpu_target")
