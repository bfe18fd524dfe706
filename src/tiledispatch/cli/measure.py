"""Running a selection on generated inputs: timing, throughput, validation, and where it ran."""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.select.selector import Selection

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


def interpreter_notice(target: Target, problem: GemmProblem) -> str | None:
    """What to tell the user when kernels run on the interpreter (None on a GPU)."""
    if target.backend != "interpreter":
        return None
    text = ("running on Triton's interpreter on the CPU: results are exact, but times are interpreter "
            "times, not GPU performance")
    if problem.flops > INTERPRETER_FLOPS_WARNING:
        text += f"; {problem.describe()} is large for the interpreter and may take minutes"
    return text


def throughput(problem: GemmProblem, time_ms: float) -> dict[str, float]:
    seconds = time_ms * 1e-3
    if seconds <= 0:
        return {"time_ms": time_ms, "tflops": 0.0, "gbps": 0.0}
    return {"time_ms": time_ms, "tflops": problem.flops / seconds / 1e12,
            "gbps": problem.min_bytes / seconds / 1e9}


def measure(selection: Selection, request: GemmProblem, args: Any, target: Target, *, validate: bool,
            timing: bool = True, reference: Any = None) -> dict:
    """Run once (validating that output if asked), then time repeated runs into the same output buffer.

    Throughput counts the requested problem's work, not the padded one's, so padding costs show as time.
    `reference` (from runtime.reference.reference(args)) saves recomputing it when measuring many kernels.
    """
    from tiledispatch.bench.timer import time_ms
    from tiledispatch.runtime.execute import run_selection

    out = run_selection(selection, dataclasses.replace(args, out=None))
    result: dict[str, Any] = {}
    if validate:
        result["validation"] = check(out, args, request.dtype, reference)
    if timing:
        fixed = dataclasses.replace(args, out=out)
        ms = time_ms(lambda: run_selection(selection, fixed), target.device)
        result["execution"] = throughput(request, ms)
    return result


def check(out: Any, args: Any, dtype: str, reference: Any = None) -> dict[str, Any]:
    """runtime.reference.validate, reusing a precomputed float64 reference when one is given."""
    from tiledispatch.runtime import reference as ref

    if reference is None:
        return ref.validate(out, args, dtype)
    result: dict[str, Any] = dict(ref.errors(out, reference))
    result["passed"] = result["rel_err"] <= ref.TOLERANCES[dtype]
    return result


def status_of(result: dict) -> str:
    validation = result.get("validation")
    if validation is not None and not validation["passed"]:
        return "failed_validation"
    return "ok"
