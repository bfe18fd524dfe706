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
from tiledispatch.runtime.arguments import GemmArgs, argument_values, problem_from_args


@dataclasses.dataclass(frozen=True)
class Support:
    """Truthy when supported; `reason` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    def __iter__(self):
        return iter((self.ok, self.reason))


class Kernel:
    def __init__(self, config: GemmConfig, arch: ArchSpec, entry_dir: Path | None = None) -> None:
        self.config = config
        self.arch = arch
        self.entry_dir = entry_dir
        self._launchers: list | None = None

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
            alpha: float = 1.0, beta: float = 0.0, out_dtype: str | None = None, allow_tf32: bool | None = None) -> Any:
        """Compute this instance's GEMM (with its fused epilogue) on torch tensors; returns `out`."""
        cfg = self.config
        args = GemmArgs(a, b, out, c, bias, cfg.bias if bias is not None else "none", tuple(d), alpha, beta,
                        cfg.activation, out_dtype or cfg.out_dtype,
                        cfg.dtype == "tf32" if allow_tf32 is None else allow_tf32)
        problem = problem_from_args(args, prefer_layout=cfg.layout)
        support = self.is_supported(problem)
        if not support:
            raise UnsupportedProblem(f"{self.name} cannot run {problem.describe()}: {support.reason}",
                                     field=support.reason.split(":", 1)[0])
        return self.launch(args, problem)

    def launch(self, args: GemmArgs, problem: GemmProblem) -> Any:
        """Launch on prepared arguments (problem already validated against this kernel)."""
        import torch

        launchers = self._launchers_or_raise()
        cfg, m, n, k = self.config, problem.m, problem.n, problem.k
        _check_device_arch(args.a.device, self.arch)
        if args.out is None:
            shape = (problem.batch, m, n) if max(args.a.dim(), args.b.dim()) == 3 else (m, n)
            args.out = torch.empty(shape, dtype=torch_dtype(problem.out_dtype), device=args.a.device)
        if cfg.acc_dtype == "int32":
            args.alpha, args.beta = _integral("alpha", args.alpha), _integral("beta", args.beta)
        plan = family_module(cfg).launch_plan(cfg, m, n, k, problem.batch, _sm_count(args.a.device, self.arch))
        extra = dict(plan.scalars)
        for name, elements, dtype in plan.workspaces:
            extra[name] = torch.empty(elements, dtype=torch_dtype(dtype), device=args.a.device)
        values = argument_values(args, m, n, k, extra)
        for launcher, grid in zip(launchers, plan.grids):
            launcher.launch(grid, values, args.a.device)
        return args.out


def _sm_count(device, arch: ArchSpec) -> int:
    """Streaming multiprocessors of the device (the arch's count on the interpreter): persistent grids."""
    from tiledispatch.runtime.launcher import uses_interpreter

    if uses_interpreter(device):
        return arch.sm_count
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def _integral(field: str, value: float) -> int:
    if float(value) != int(value):
        raise BadInput(f"{field}={value} must be an integer for int8 GEMMs (exact int32 epilogue)", field=field)
    return int(value)


def _check_device_arch(device, arch: ArchSpec) -> None:
    from tiledispatch.runtime.launcher import uses_interpreter

    if uses_interpreter(device):
        return
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if major * 10 + minor != arch.cc:
        raise BadInput(f"kernel built for {arch.name} cannot run on a sm_{major}{minor} device; build the registry "
                       f"with gpu_target='sm_{major}{minor}'", field="gpu_target")
