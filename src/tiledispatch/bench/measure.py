"""Measuring (problem, kernel) pairs inside a sweep worker: the inputs and the reference of a problem are made
once, every kernel reuses them; each kernel's output is poisoned (NaN), computed once and checked against the
reference before it is timed, so a wrong result becomes a `wrong_result` row, never a timing."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tiledispatch.bench.schema import Outcome
from tiledispatch.bench.timer import SweepTimer
from tiledispatch.dtypes import torch_dtype
from tiledispatch.errors import TileDispatchError, UnsupportedProblem
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.kernel import Kernel

Problem = GemmProblem | ConvProblem


class DeviceFault(Exception):
    """The device is in an unusable state after a kernel (a sticky CUDA error): the worker must be
    replaced."""


class ProblemBench:
    """One problem's inputs on a device, its reference, and runners for kernels and the vendor library."""

    def __init__(self, problem: Problem, device: Any, seed: int = 0) -> None:
        self.problem, self.device = problem, device
        exact = device.type == "cpu"     # float64 on the CPU; float32 (no TF32) on the GPU at real sizes
        if isinstance(problem, ConvProblem):
            from tiledispatch.testing.reference import conv_reference, make_conv_args

            self.args = make_conv_args(problem, device, seed, poison=True)
            self.reference = conv_reference(problem, self.args, exact=exact)
        else:
            from tiledispatch.testing.inputs import make_args
            from tiledispatch.testing.reference import reference

            self.args = make_args(problem, device, seed)
            self.reference = reference(self.args, exact=exact)
            shape = (problem.batch, problem.m, problem.n) if problem.batch > 1 else (problem.m, problem.n)
            import torch

            self.args.out = torch.empty(shape, dtype=torch_dtype(problem.out_dtype), device=device)

    @property
    def output(self) -> Any:
        if isinstance(self.problem, ConvProblem):
            from tiledispatch.kernels.conv_common import OUTPUT_ROLE

            return self.args.get(OUTPUT_ROLE[self.problem.direction])
        return self.args.out

    def runner(self, kernel: Kernel, padded: bool) -> Callable[[], Any]:
        """A call computing the problem with `kernel` into the problem's output buffer (on exactly padded
        copies when `padded`, copies included, as selection would run it)."""
        if isinstance(self.problem, ConvProblem):
            args, problem = self.args, self.problem
            return lambda: kernel.launch(args, problem)
        from tiledispatch.runtime.execute import run_selection
        from tiledispatch.select.selector import Selection
        from tiledispatch.select.selector import plan_for as selector_plan

        plan = selector_plan(kernel, self.problem)
        if plan is None or plan.padded != padded:
            raise UnsupportedProblem(f"{kernel.name} does not compute {self.problem.describe()} "
                                     f"{'on padded operands' if padded else 'directly'}", field="padded")
        selection = Selection(kernel, "sweep", plan.problem, plan.padded)
        args = self.args
        return lambda: run_selection(selection, args)

    def rel_err(self, out: Any) -> float:
        from tiledispatch.testing.reference import errors

        return errors(out, self.reference)["rel_err"]

    def tolerance(self) -> float:
        from tiledispatch.testing.reference import CONV_TOLERANCES
        from tiledispatch.testing.reference import TOLERANCES

        return (CONV_TOLERANCES if isinstance(self.problem, ConvProblem) else TOLERANCES)[self.problem.dtype]

    def poison(self) -> None:
        out = self.output
        if out.dtype.is_floating_point:
            out.fill_(math.nan)
        else:
            out.fill_(-123)


def measure_kernel(bench: ProblemBench, kernel: Kernel, padded: bool, timer: SweepTimer) -> Outcome:
    """Check, then time one kernel on the problem. A TileDispatchError or a launch/resource failure of the
    kernel is the row's runtime_error; a sticky device error raises DeviceFault after being recorded."""
    try:
        fn = bench.runner(kernel, padded)
        bench.poison()
        return _check_then_time(bench, fn, timer, padded)
    except TileDispatchError as exc:
        return Outcome("runtime_error", f"{type(exc).__name__}: {exc}", padded)
    except (RuntimeError, ValueError, AssertionError) as exc:   # launch failures, out of resources
        fault = _is_device_fault(exc)
        outcome = Outcome("runtime_error", f"{type(exc).__name__}: {_first_line(exc)}", padded)
        if fault:
            raise DeviceFault(outcome.error) from exc
        return outcome


def measure_vendor(bench: ProblemBench, timer: SweepTimer) -> tuple[str, Outcome]:
    """The vendor library's time on the same inputs (its result checked like a kernel's)."""
    from tiledispatch.errors import UnsupportedProblem
    from tiledispatch.bench.vendor import CUBLAS, CUDNN, vendor_call

    try:
        label, fn = vendor_call(bench.problem, bench.args)
    except UnsupportedProblem as exc:
        return (CUDNN if isinstance(bench.problem, ConvProblem) else CUBLAS), Outcome("unsupported", str(exc))
    return label, _check_then_time(bench, fn, timer, False)


def _check_then_time(bench: ProblemBench, fn: Callable[[], Any], timer: SweepTimer, padded: bool) -> Outcome:
    """One call checked against the reference (a wrong result is never timed), then the timed samples."""
    out = fn()
    _synchronize(bench.device)
    err = bench.rel_err(out)
    if not err <= bench.tolerance():
        return Outcome("wrong_result", f"rel_err {err:.3g} > {bench.tolerance():g}", padded, rel_err=err)
    s = timer.measure(fn)
    return Outcome("ok", "", padded, s.median_ms, s.p20_ms, s.p80_ms, s.count, s.stable, err)


def _synchronize(device: Any) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


_STICKY = ("illegal memory access", "illegal instruction", "unspecified launch failure", "misaligned address",
           "device-side assert", "CUDA_ERROR_ILLEGAL", "an illegal", "launch timed out")


def _is_device_fault(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in _STICKY)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def plan_for(kernel: Kernel, problem: Problem) -> tuple[bool | None, str]:
    """(padded, "") when `kernel` can compute `problem` (directly: False; on exactly padded operands: True),
    or (None, reason) when it cannot (the pair's `unsupported` row)."""
    from tiledispatch.select.selector import plan_for as selector_plan

    plan = selector_plan(kernel, problem)
    if plan is None:
        return None, kernel.is_supported(problem).reason
    return plan.padded, ""
