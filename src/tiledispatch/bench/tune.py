"""`tune`: time plans on the device on random inputs of the request (padding included) and return the winner.

Selection stays pure: dispatch asks selector.to_time which plans to time, calls `time_plans`, stores the
winner in the tuning DB and hands the timings to selector.measured.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tiledispatch import settings
from tiledispatch.bench.timer import StopRule, SweepTimer, time_ms
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.runtime.execute import run_selection
from tiledispatch.select.selector import Selection, fastest

if TYPE_CHECKING:
    from tiledispatch.problems.gemm import GemmProblem
    from tiledispatch.select.selector import Plan


def _gemm_runner(plan: Plan, args: Any) -> Callable[[], Any]:
    selection = Selection(plan.kernel, "tune", plan.problem, plan.padded)
    out = run_selection(selection, dataclasses.replace(args, out=None))
    fixed = dataclasses.replace(args, out=out)
    return lambda: run_selection(selection, fixed)


# `auto` when unsure: a few ms per plan. Samples until the median holds within 2% over a chunk (10 at least)
QUICK_RULE = StopRule(min_samples=10, max_samples=40, rtol=0.02, budget_ms=4.0)


def plan_timer(device: Any, quick: bool) -> Callable[[Callable[[], Any]], float]:
    """Median ms of a callable on `device`, as the sweeps time kernels (bench/timer.SweepTimer: L2 flushed,
    the host kept ahead of the device so that no host time lands between the events). triton's do_bench,
    used before, lets the host time of a call leak in whenever it exceeds the flush (tests/gpu checks it):
    in a model's process `auto` timed cuDNN's 1x1 weight gradient (n32 c2048 k512 7x7) at 68 us, where
    do_bench in a quiet process measured 12 us, and picked ours. On the CPU interpreter: wall time."""
    if device.type != "cuda":
        return lambda fn: time_ms(fn, device)
    timer = SweepTimer(device, QUICK_RULE if quick else StopRule())
    return lambda fn: timer.measure(fn).median_ms


def time_plans(plans: list[Plan], request: GemmProblem | ConvProblem, device: Any, quick: bool = False
               ) -> tuple[Plan, dict[str, float]]:
    """(the fastest plan, median ms of every plan by label) on `device` (plan_timer); quick: a short budget
    (QUICK_RULE: what `auto` spends when unsure). A vendor plan stays the pick unless ours beats it by more
    than TILEDISPATCH_VENDOR_MARGIN (selector.fastest)."""
    from tiledispatch.testing.inputs import make_args

    if isinstance(request, ConvProblem):
        from tiledispatch.testing.reference import make_conv_args

        conv_args = make_conv_args(request, device)

        def runner(plan: Plan) -> Callable[[], Any]:
            return lambda: plan.kernel.launch(conv_args, plan.problem)
    else:
        args = make_args(request, device)

        def runner(plan: Plan) -> Callable[[], Any]:
            return _gemm_runner(plan, args)
    timed = plan_timer(device, quick)
    timings = {plan.label: timed(runner(plan)) for plan in plans}
    winner = fastest(plans, timings, settings.vendor_margin())
    return winner, timings
