"""`tune`: time plans on the device on random inputs of the request (padding included) and return the winner.

Selection stays pure: dispatch asks selector.to_time which plans to time, calls `time_plans`, stores the
winner in the tuning DB and hands the timings to selector.measured.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tiledispatch import settings
from tiledispatch.bench.timer import time_ms
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


def time_plans(plans: list[Plan], request: GemmProblem | ConvProblem, device: Any, quick: bool = False
               ) -> tuple[Plan, dict[str, float]]:
    """(the fastest plan, median ms of every plan by label) on `device`; quick: a short budget (about 2 ms of
    warm-up and 10 ms of timed runs per plan: what `auto` spends when unsure). A vendor plan stays the pick
    unless ours beats it by more than TILEDISPATCH_VENDOR_MARGIN (selector.fastest)."""
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
    budget = {"warmup_ms": 2, "rep_ms": 10} if quick else {}
    timings = {plan.label: time_ms(runner(plan), device, **budget) for plan in plans}
    winner = fastest(plans, timings, settings.vendor_margin())
    return winner, timings
