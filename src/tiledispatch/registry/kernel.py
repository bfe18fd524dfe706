"""Kernel: one built instance of a config for an arch (GemmKernel, ConvKernel), and its bound launches.

A bound launch holds everything one argument signature needs (loaded cubins, grids, argument order); each
kernel remembers its bound launches in a `Memo`, dropped when the kernel is pointed at another cache entry.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import torch_dtype
from tiledispatch.errors import BadInput, NoKernelFound, UnsupportedProblem
from tiledispatch.kernels.conv_common import CONV_SLOTS, OUTPUT_ROLE
from tiledispatch.kernels.family import family_module, problem_mismatch
from tiledispatch.memo import Memo, bump_build_epoch
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
from tiledispatch.runtime.conv_args import (
    KERNEL_FIELDS,
    ConvArgs,
    check_args,
    conv_values,
    empty_channels_last,
    shapes,
    tensor_align,
)
from tiledispatch.runtime.launcher import (
    BoundLaunch,
    EntryLauncher,
    EntryLaunches,
    bind,
    buffer_slots,
    call_key,
    cuda_runtime,
    interpret_switch,
    load_launchers,
    sm_count,
    tensor_key,
    uses_interpreter,
)

if TYPE_CHECKING:
    import torch

_ROLES = ("x", "w", "y")


@dataclasses.dataclass(frozen=True)
class Support:
    """Truthy when supported; `reason` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    def __iter__(self) -> Iterator[Any]:
        return iter((self.ok, self.reason))


class Kernel:
    """What every built instance has: its config, arch, cache entry, support check and bound launches."""

    def __init__(self, config: GemmConfig | ConvConfig, arch: ArchSpec,
                 entry_dir: Path | None = None) -> None:
        self.config = config
        self.arch = arch
        self._entry_dir = entry_dir
        self._launchers: list[EntryLauncher] | None = None
        self.launches: Memo[Any] = Memo()   # (problem, argument signature) -> bound launch

    @property
    def entry_dir(self) -> Path | None:
        return self._entry_dir

    @entry_dir.setter
    def entry_dir(self, value: Path | None) -> None:
        """Pointing the kernel at another cache entry drops what was loaded or remembered from the old one."""
        self._entry_dir = value
        self._launchers = None
        self.launches.clear()
        bump_build_epoch()

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
        return f"{type(self).__name__}({self.name}, {self.arch.name}, {state})"

    def is_supported(self, problem: GemmProblem | ConvProblem) -> Support:
        cfg = self.config
        if isinstance(cfg, ConvConfig):
            if not isinstance(problem, ConvProblem):
                return Support(False, f"op: {self.name} computes convolutions, not {type(problem).__name__}")
            reason = problem_mismatch(cfg, problem)
        elif not isinstance(problem, GemmProblem):
            return Support(False, f"op: {self.name} computes GEMMs, not {type(problem).__name__}")
        else:
            reason = problem_mismatch(cfg, problem)
        return Support(reason is None, reason or "")

    def launchers(self) -> list[EntryLauncher]:
        """The loaded entries of the built instance (NoKernelFound when it is not built)."""
        if self.entry_dir is None:
            raise NoKernelFound(f"kernel {self.name} is not built; call Registry.build() first",
                                field="kernel")
        if self._launchers is None:
            self._launchers = load_launchers(self.entry_dir)
        return self._launchers

    def _require(self, problem: GemmProblem | ConvProblem) -> None:
        support = self.is_supported(problem)
        if not support:
            raise UnsupportedProblem(f"{self.name} cannot run {problem.describe()}: {support.reason}",
                                     field=support.reason.split(":", 1)[0])

    def launch(self, args: Any, problem: Any) -> Any:
        """Launch on checked arguments (problem already matched to this kernel); returns the written
        tensor."""
        raise NotImplementedError

    def bound_launch(self, args: Any, problem: Any) -> Any:
        """The launch of `problem` on arguments of this signature, remembered (binding allocates the written
        tensor when it is None: its strides are part of the launch)."""
        raise NotImplementedError


class GemmKernel(Kernel):
    """A built GEMM instance: `run(a, b, ...)` computes its GEMM with its fused epilogue."""

    config: GemmConfig

    def run(self, a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
            c: torch.Tensor | None = None, bias: torch.Tensor | None = None, d: tuple = (),
            alpha: float = 1.0, beta: float = 0.0, out_dtype: str | None = None,
            allow_tf32: bool | None = None, scale_a: torch.Tensor | None = None,
            scale_b: torch.Tensor | None = None) -> torch.Tensor:
        """out = epilogue(alpha * a @ b ...) on torch tensors; scale_a / scale_b scale fp8 operands (None: 1).
        The first call of an argument signature validates and binds; later calls reuse the bound launch."""
        key = call_key(a, b, out, c, bias, d, beta, scale_a, scale_b, ("run", out_dtype, allow_tf32))
        bound = self.launches.get(key)
        if bound is not None:
            return bound(a, b, out, c, bias, d, alpha, beta, scale_a, scale_b)
        cfg = self.config
        args = GemmArgs(a, b, out, c, bias, cfg.bias if bias is not None else "none", tuple(d), alpha, beta,
                        cfg.activation, out_dtype or cfg.out_dtype,
                        cfg.dtype == "tf32" if allow_tf32 is None else allow_tf32, scale_a=scale_a,
                        scale_b=scale_b)
        problem = problem_from_args(args, prefer_layout=cfg.layout)
        self._require(problem)
        bound = self._bind(args, problem)
        if key is not None and bound.reusable:
            self.launches.put(key, bound)
        return bound(args.a, args.b, args.out, args.c, args.bias, args.d, args.alpha, args.beta, args.scale_a,
                     args.scale_b)

    def launch(self, args: GemmArgs, problem: GemmProblem) -> Any:
        bound = self.bound_launch(args, problem)
        args.out = bound(args.a, args.b, args.out, args.c, args.bias, args.d, args.alpha, args.beta,
                         args.scale_a, args.scale_b)
        return args.out

    def bound_launch(self, args: GemmArgs, problem: GemmProblem) -> BoundLaunch:
        key = launch_key(problem, args)
        bound = self.launches.get(key) if key is not None else None
        if bound is None:
            bound = self._bind(args, problem)
            if key is not None and bound.reusable:
                self.launches.put(key, bound)
        return bound

    def _bind(self, args: GemmArgs, problem: GemmProblem) -> BoundLaunch:
        import torch

        launchers = self.launchers()
        cfg, m, n, k = self.config, problem.m, problem.n, problem.k
        device = args.a.device
        check_device_arch(device, self.arch)
        shape = (problem.batch, m, n) if max(args.a.dim(), args.b.dim()) == 3 else (m, n)
        dtype = torch_dtype(cast(str, problem.out_dtype))   # problems fill out_dtype when constructed
        if args.out is None:
            args.out = torch.empty(shape, dtype=dtype, device=device)
        plan = family_module(cfg).launch_plan(cfg, m, n, k, problem.batch, device_sm_count(device, self.arch))
        return bind(launchers, plan, args, (m, n, k), shape, dtype, cfg.acc_dtype == "int32")


class ConvKernel(Kernel):
    """A built convolution instance. `run(problem, x=..., w=..., y=..., bias=...)` takes the tensors by
    forward role (y is dy in the backward directions) and returns the written one (allocated when None)."""

    config: ConvConfig

    def run(self, problem: ConvProblem, *, x: torch.Tensor | None = None, w: torch.Tensor | None = None,
            y: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
        args = ConvArgs(x, w, y, bias)
        problem = prepare(problem, args, KERNEL_FIELDS)
        self._require(problem)
        return self.launch(args, problem)

    def launch(self, args: ConvArgs, problem: ConvProblem) -> Any:
        return self.bound_launch(args, problem)(args.x, args.w, args.y, args.bias)

    def bound_launch(self, args: ConvArgs, problem: ConvProblem) -> ConvBound:
        key = conv_call_key(problem, args)
        bound = self.launches.get(key)
        if bound is None:
            bound = self._bind(args, problem)
            if bound.reusable:
                self.launches.put(key, bound)
        return bound

    def _bind(self, args: ConvArgs, problem: ConvProblem) -> ConvBound:
        launchers = self.launchers()
        cfg = self.config
        written = OUTPUT_ROLE[problem.direction]
        device = next(t for t in (args.x, args.w, args.y) if t is not None).device
        check_device_arch(device, self.arch)
        out_shape, out_dtype = shapes(problem)[written], torch_dtype(cast(str, problem.out_dtype))
        tensors = {role: args.get(role) for role in _ROLES}
        if tensors[written] is None:
            tensors[written] = empty_channels_last(out_shape, out_dtype, device)
        full = ConvArgs(tensors["x"], tensors["w"], tensors["y"], args.bias)
        module = family_module(cfg)
        plan = module.launch_plan(cfg, problem, device_sm_count(device, self.arch))
        dyn = (full.x, full.w, full.y, full.bias)
        values = conv_values(problem, full)
        if hasattr(module, "extra_values"):   # a family whose kernel takes other parameters (1x1 as GEMM)
            values.update(module.extra_values(cfg, problem, tensors))
        values.update(dict(plan.scalars))
        slots = module.slots(cfg) if hasattr(module, "slots") else CONV_SLOTS
        for name, slot in slots.items():
            values[name] = dyn[slot]
        buffers, workspaces = buffer_slots(plan, len(dyn))
        values.update(buffers)
        index = None if uses_interpreter(device) else (device.index if device.index is not None
                                                       else cuda_runtime().get_device())
        n_dyn = len(dyn) + len(buffers)
        bound = [launcher.bind(grid, values, dyn, n_dyn, index, lambda name, _: slots.get(name))
                 for launcher, grid in zip(launchers, plan.grids)
                 if min(grid) > 0]   # empty grid: not launched
        return ConvBound([e for e, _ in bound], device, index, _ROLES.index(written), out_shape, out_dtype,
                         workspaces, all(ok for _, ok in bound))


class ConvBound(EntryLaunches):
    """Every launch of a conv instance for one argument signature: call it with (x, w, y, bias)."""

    def __init__(self, entries: list, device: Any, index: int | None, out_slot: int,
                 out_shape: tuple[int, ...], out_dtype: Any, workspaces: tuple[tuple[int, Any, bool], ...],
                 reusable: bool) -> None:
        super().__init__(entries, device, index, workspaces)
        self.out_slot, self.out_shape = out_slot, out_shape
        self.out_dtype, self.reusable = out_dtype, reusable

    def __call__(self, x: Any, w: Any, y: Any, bias: Any) -> Any:
        dyn = [x, w, y, bias]
        if dyn[self.out_slot] is None:
            dyn[self.out_slot] = empty_channels_last(self.out_shape, self.out_dtype, self.device)
        packed = tuple(dyn)
        self.launch(packed)
        return packed[self.out_slot]


def make_kernel(config: GemmConfig | ConvConfig, arch: ArchSpec) -> Kernel:
    """The kernel object of a config: a ConvKernel for convolutions, a GemmKernel for GEMMs."""
    return ConvKernel(config, arch) if isinstance(config, ConvConfig) else GemmKernel(config, arch)


def prepare(problem: ConvProblem, args: ConvArgs, fields: dict[str, str] | None = None) -> ConvProblem:
    """Check the tensors against the problem (`fields`: how the caller names each role, default td.conv*'s);
    returns the problem with the alignment the tensors guarantee (lowered to 1 when they are less aligned)."""
    if not isinstance(problem, ConvProblem):
        raise BadInput(f"problem must be a ConvProblem, got {type(problem).__name__}", field="problem")
    check_args(problem, args, fields)
    align = min(cast(int, problem.align), tensor_align(problem, args))   # filled when constructed
    return problem if align == problem.align else dataclasses.replace(problem, align=align)


def conv_call_key(problem: ConvProblem, args: ConvArgs) -> tuple:
    keys = tuple(None if t is None else tensor_key(t) for t in (args.x, args.w, args.y, args.bias))
    return (problem, keys, interpret_switch())


def launch_key(problem: GemmProblem, args: GemmArgs) -> tuple | None:
    """call_key of prepared arguments: every GemmArgs field but alpha and beta's value is part of it."""
    extra = tuple(getattr(args, name) for name in _OPTION_FIELDS)
    key = call_key(args.a, args.b, args.out, args.c, args.bias, args.d, args.beta, args.scale_a, args.scale_b,
                   extra)
    return None if key is None else (problem, key)


_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(GemmArgs)
                       if f.name not in ("a", "b", "out", "c", "bias", "d", "alpha", "beta", "scale_a",
                                         "scale_b"))


def device_sm_count(device: Any, arch: ArchSpec) -> int:
    """Streaming multiprocessors of the device (the arch's count on the interpreter): persistent grids."""
    if uses_interpreter(device):
        return arch.sm_count
    return sm_count(device.index if device.index is not None else cuda_runtime().get_device())


def check_device_arch(device: Any, arch: ArchSpec) -> None:
    if uses_interpreter(device):
        return
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if major * 10 + minor != arch.cc:
        raise BadInput(f"kernel built for {arch.name} cannot run on a sm_{major}{minor} device; build the "
                       f"registry with gpu_target='sm_{major}{minor}'", field="gpu_target")
