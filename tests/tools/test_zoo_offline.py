"""tools/zoo_offline.py: ranking a zoo problem's timed plans offline (conv and GEMM) gives the efficiencies
of the picks, and --check reports picks unlike the GPU run's."""
from __future__ import annotations

from pathlib import Path

import pytest

ZOO = Path(__file__).resolve().parents[2] / "benchmarks" / "zoo" / "unseen_zoo.json"


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/zoo_offline.py")


@pytest.mark.parametrize("key", ["conv:fwd:2d", "gemm"])
def test_efficiency_of_the_model_pick_and_the_check(tool, key):
    from tiledispatch.select import cost_model

    problems = tool.zoo_problems(ZOO)
    signature, problem = next((s, p) for s, p in problems.items() if s.startswith(key))
    registry, essential = tool.registry_for(problem)
    labels = [p.label for p in registry.space_plans(problem) if not p.label.startswith("vendor")]
    model, _ = cost_model.shipped_model("sm_90", problem)
    times = {label: 1.0 for label in labels}
    chosen = tool.picks(problem, times, registry, essential, model)
    pick = chosen["pick"]
    fastest = next(label for label in labels if label != pick)
    times[fastest] = 0.5                                    # the pick runs at half the oracle's speed
    row = {"problem": signature, "times": times, "model_pick": pick}
    summary = tool.evaluate([row], problems, model, check=True)
    assert summary["efficiency"]["space"]["mean"] == 0.5
    assert summary["efficiency"]["rules"]["mean"] in (0.5, 1.0)
    # the essential preset's pick: at the oracle's speed only where it is the fastest plan
    ess = summary["efficiency"]["essential"]["mean"]
    assert chosen["essential"] and ess == (1.0 if chosen["essential"][0] == fastest else 0.5)
    assert set(chosen["essential"]) <= {p.label for p in registry.space_plans(problem)
                                        if p.kernel.name in essential}
    assert summary["picks_unlike_the_gpu_run"] == 0
    summary = tool.evaluate([row | {"model_pick": fastest}], problems, model, check=True)
    assert summary["picks_unlike_the_gpu_run"] == 1


def test_untimed_top1_and_the_worst_list(tool):
    """A run that did not time the model's top-1 over the space is counted (its pick over the timed plans is
    not what `auto` runs), and --worst lists the lowest-efficiency problems with their picks."""
    from tiledispatch.select import cost_model

    problems = tool.zoo_problems(ZOO)
    signature, problem = next((s, p) for s, p in problems.items() if s.startswith("conv:fwd:2d"))
    registry, essential = tool.registry_for(problem)
    labels = [p.label for p in registry.space_plans(problem) if not p.label.startswith("vendor")]
    model, _ = cost_model.shipped_model("sm_90", problem)
    top = tool.picks(problem, dict.fromkeys(labels, 1.0), registry, essential, model)["pick"]
    times = {label: 1.0 for label in labels if label != top}   # the run lacks the top-1
    row = {"problem": signature, "times": times, "model_pick": top}
    summary = tool.evaluate([row], problems, model, check=False, worst=3)
    assert summary["untimed_top1"] == 1 and "space_where_top1_timed" not in summary   # no other problem
    (case,) = summary["worst"]
    assert case["untimed_top1"] == top and case["pick"] != top and case["efficiency"] == 1.0
    summary = tool.evaluate([row | {"times": dict.fromkeys(labels, 1.0)}], problems, model, check=False)
    assert summary["untimed_top1"] == 0 and "worst" not in summary
