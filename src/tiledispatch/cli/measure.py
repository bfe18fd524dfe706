"""Running a selection on generated inputs: timing, throughput, validation, and where it ran."""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.select.selector import Selection

Problem = GemmProblem | ConvProblem

# Above this many FLOPs a run on Triton's interpreter takes seconds to minutes: warn before starting.
INTERPRETER_FLOPS_WARNING = 2 * 256 ** 3


@dataclasses.dataclass
class Target:
    """Where kernels run: a CUDA device (compiled cubins) or the CPU (Triton's interpreter)."""

    device: Any
    backend: str        # "cuda" or "interpreter"
    name: str           # GPU name, or "cpu (Triton interpreter)"

    def describe(self) -> str:
        return f"{self.name} [{self.backend}]"


def pick_target(registry) -> Target:
    from tiledispatch.runtime.launcher import uses_interpreter

    device = registry.default_device()
    backend = "interpreter" if uses_interpreter(device) else "cuda"
    if device.type == "cuda":
        import torch

        name = torch.cuda.get_device_name(device)
        if backend == "interpreter":
            name += " (TILEDISPATCH_INTERPRET=1: Triton interpreter)"
    else:
        name = "cpu (Triton interpreter, no GPU)"
    return Target(device, backend, name)


def interpreter_notice(target: Target, problem: Problem) -> str | None:
    """What to tell the user when kernels run on the interpreter (None on a GPU)."""
    if target.backend != "interpreter":
        return None
    text = ("running on Triton's interpreter on the CPU: results are exact, but times are interpreter "
            "times, not GPU performance")
    if problem.flops > INTERPRETER_FLOPS_WARNING:
        text += f"; {problem.describe()} is large for the interpreter and may take minutes"
    return text


def throughput(problem: Problem, time_ms: float) -> dict[str, float]:
    seconds = time_ms * 1e-3
    if seconds <= 0:
        return {"time_ms": time_ms, "tflops": 0.0, "gbps": 0.0}
    return {"time_ms": time_ms, "tflops": problem.flops / seconds / 1e12,
            "gbps": problem.min_bytes / seconds / 1e9}


def make_inputs(problem: Problem, device: Any, seed: int = 0) -> Any:
    """Random inputs of the problem on `device` (GemmArgs, or ConvArgs with a NaN-poisoned written tensor)."""
    if isinstance(problem, ConvProblem):
        from tiledispatch.testing.reference import make_conv_args

        return make_conv_args(problem, device, seed=seed, poison=True)
    from tiledispatch.testing.inputs import make_args

    return make_args(problem, device, seed=seed)


def reference_of(problem: Problem, args: Any) -> Any:
    """The float64 result the problem's output is checked against."""
    if isinstance(problem, ConvProblem):
        from tiledispatch.testing.reference import conv_reference

        return conv_reference(problem, args)
    from tiledispatch.testing.reference import reference

    return reference(args)


def _tolerance(problem: Problem) -> float:
    if isinstance(problem, ConvProblem):
        from tiledispatch.testing.reference import CONV_TOLERANCES

        return CONV_TOLERANCES[problem.dtype]
    from tiledispatch.testing.reference import TOLERANCES

    return TOLERANCES[problem.dtype]


def _runner(selection: Selection, args: Any) -> tuple[Any, Any]:
    """(first run -> output, a function repeating the run into that same output)."""
    if isinstance(selection.problem, ConvProblem):
        from tiledispatch.kernels.conv_common import OUTPUT_ROLE

        written = args.get(OUTPUT_ROLE[selection.problem.direction])
        written.fill_(float("nan"))     # poisoned again: an earlier kernel may have written it (profile)
        bound = selection.kernel.bound_launch(args, selection.problem)
        def run():
            return bound(args.x, args.w, args.y, args.bias)
        return run(), run
    from tiledispatch.runtime.execute import run_selection

    out = run_selection(selection, dataclasses.replace(args, out=None))
    fixed = dataclasses.replace(args, out=out)
    return out, lambda: run_selection(selection, fixed)


def measure(selection: Selection, request: Problem, args: Any, target: Target, *, validate: bool,
            timing: bool = True, reference: Any = None) -> dict:
    """Run once (validating that output if asked), then time repeated runs into the same output buffer.

    Throughput counts the requested problem's work, not the padded one's, so padding costs show as time.
    `reference` (from reference_of(request, args)) saves recomputing it when measuring many kernels.
    """
    from tiledispatch.bench.timer import time_ms

    out, again = _runner(selection, args)
    result: dict[str, Any] = {}
    if validate:
        result["validation"] = check(out, args, request, reference)
    if timing:
        result["execution"] = throughput(request, time_ms(again, target.device))
    return result


def check(out: Any, args: Any, problem: Problem, reference: Any = None) -> dict[str, Any]:
    """Relative and max errors of `out` against the float64 reference (computed unless given), and whether
    they are within the problem dtype's tolerance."""
    from tiledispatch.testing.reference import errors

    expected = reference_of(problem, args) if reference is None else reference
    result: dict[str, Any] = dict(errors(out, expected))
    result["passed"] = result["rel_err"] <= _tolerance(problem)
    return result


def status_of(result: dict) -> str:
    validation = result.get("validation")
    if validation is not None and not validation["passed"]:
        return "failed_validation"
    return "ok"
