"""ConvKernel: one built instance of a ConvConfig for an arch."""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.configs.conv_validity import conv_problem_mismatch
from tiledispatch.dtypes import torch_dtype
from tiledispatch.errors import BadInput, UnsupportedProblem
from tiledispatch.kernels import family_module
from tiledispatch.kernels.conv_common import CONV_SLOTS, OUTPUT_ROLE
from tiledispatch.kernels.spec import LaunchPlan
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.registry.kernel import Kernel, Support, _check_device_arch, _sm_count
from tiledispatch.runtime.conv_args import (ConvArgs, check_args, conv_values, empty_channels_last, shapes,
                                            tensor_align)
from tiledispatch.runtime.launcher import (EntryLaunches, buffer_slots, cuda_runtime, interpret_switch, remember,
                                           tensor_key, uses_interpreter)

_ROLES = ("x", "w", "y")


class ConvKernel(Kernel):
    """A built convolution instance. `run(problem, x=..., w=..., y=..., bias=...)` takes the tensors by forward
    role (y is dy in the backward directions) and returns the written one (allocated when None)."""

    def is_supported(self, problem: Any) -> Support:
        if not isinstance(problem, ConvProblem):
            return Support(False, f"op: {self.name} computes convolutions, not {type(problem).__name__}")
        reason = conv_problem_mismatch(self.config, problem)
        return Support(reason is None, reason or "")

    def run(self, problem: ConvProblem, *, x: Any = None, w: Any = None, y: Any = None,  # type: ignore[override]
            bias: Any = None) -> Any:
        args = ConvArgs(x, w, y, bias)
        problem = prepare(problem, args)
        support = self.is_supported(problem)
        if not support:
            raise UnsupportedProblem(f"{self.name} cannot run {problem.describe()}: {support.reason}",
                                     field=support.reason.split(":", 1)[0])
        return self.launch(args, problem)

    def launch(self, args: ConvArgs, problem: ConvProblem) -> Any:  # type: ignore[override]
        """Launch on checked arguments (problem already matched to this kernel); returns the written tensor."""
        return self.bound_launch(args, problem)(args.x, args.w, args.y, args.bias)

    def bound_launch(self, args: ConvArgs, problem: ConvProblem) -> ConvBound:  # type: ignore[override]
        key = conv_call_key(problem, args)
        bound = self._launch_memo.get(key)
        if bound is None:
            bound = self._bind_conv(args, problem)
            if bound.reusable:
                remember(self._launch_memo, key, bound)
        return bound

    def _bind_conv(self, args: ConvArgs, problem: ConvProblem) -> ConvBound:
        launchers = self._launchers_or_raise()
        cfg = self.config
        written = OUTPUT_ROLE[problem.direction]
        device = next(t for t in (args.x, args.w, args.y) if t is not None).device
        _check_device_arch(device, self.arch)
        out_shape, out_dtype = shapes(problem)[written], torch_dtype(problem.out_dtype)
        tensors = {role: args.get(role) for role in _ROLES}
        if tensors[written] is None:
            tensors[written] = empty_channels_last(out_shape, out_dtype, device)
        full = ConvArgs(tensors["x"], tensors["w"], tensors["y"], args.bias)
        module = family_module(cfg)
        plan: LaunchPlan = module.launch_plan(cfg, problem, _sm_count(device, self.arch))
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
                 for launcher, grid in zip(launchers, plan.grids) if min(grid) > 0]   # empty grid: not launched
        return ConvBound([e for e, _ in bound], device, index, _ROLES.index(written), out_shape, out_dtype,
                         workspaces, all(ok for _, ok in bound))


class ConvBound(EntryLaunches):
    """Every launch of a conv instance for one argument signature: call it with (x, w, y, bias)."""

    def __init__(self, entries: list, device: Any, index: int | None, out_slot: int, out_shape: tuple[int, ...],
                 out_dtype: Any, workspaces: tuple[tuple[int, Any, bool], ...], reusable: bool) -> None:
        super().__init__(entries, device, index, workspaces)
        self.out_slot, self.out_shape, self.out_dtype, self.reusable = out_slot, out_shape, out_dtype, reusable

    def __call__(self, x: Any, w: Any, y: Any, bias: Any) -> Any:
        dyn = [x, w, y, bias]
        if dyn[self.out_slot] is None:
            dyn[self.out_slot] = empty_channels_last(self.out_shape, self.out_dtype, self.device)
        packed = tuple(dyn)
        self.launch(packed)
        return packed[self.out_slot]


def prepare(problem: ConvProblem, args: ConvArgs) -> ConvProblem:
    """Check the tensors against the problem; returns the problem with the alignment the tensors guarantee
    (lowered to 1 when they are less aligned than it claims)."""
    if not isinstance(problem, ConvProblem):
        raise BadInput(f"problem must be a ConvProblem, got {type(problem).__name__}", field="problem")
    check_args(problem, args)
    align = min(problem.align, tensor_align(problem, args))
    return problem if align == problem.align else dataclasses.replace(problem, align=align)


def conv_call_key(problem: ConvProblem, args: ConvArgs) -> tuple:
    keys = tuple(None if t is None else tensor_key(t) for t in (args.x, args.w, args.y, args.bias))
    return (problem, keys, interpret_switch())
