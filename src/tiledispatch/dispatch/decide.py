"""The selection step of the call path: a registry's plans for a problem, chosen by the strategy (pure,
select/selector.py) or measured (`tune`, bench/tune.py), remembered per (problem, strategy)."""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch import settings
from tiledispatch.bench.schema import op_of
from tiledispatch.dispatch import space
from tiledispatch.memo import Stamp
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.store import KernelStore
from tiledispatch.runtime.launcher import device_token
from tiledispatch.select import cost_model
from tiledispatch.select.selector import (DEFAULT_TOP_K, Plan, Selection, by_model_or_rules, check_strategy,
                                          choose, db_winner, from_ranking, measured, to_measure, to_time,
                                          tuned_plan, unsure)


@dataclasses.dataclass
class Decision:
    """A remembered decision: the selection and its bound launch (None for a select alone), valid while the
    registry's stamp is the one it was made under."""

    selection: Selection
    bound: Any
    registry: KernelStore
    stamp: Stamp
    extents: tuple[int, ...] = ()   # byte extents of the written tensor and inputs of a remembered call

    def valid(self) -> bool:
        return self.stamp == self.registry.stamp()


def select(registry: KernelStore, problem: GemmProblem | ConvProblem, strategy: str = "auto",
           top_k: int | None = DEFAULT_TOP_K) -> Selection:
    """The registry's selection for a checked problem. Every strategy but `tune` is remembered in
    registry.selections; the returned Selection is shared: copy it before changing it."""
    check_strategy(strategy)
    key = None if strategy == "tune" else (problem, strategy, top_k,
                                           device_token() if strategy == "auto" else None)
    hit = registry.selections.get(key)
    if hit is not None and hit.valid():
        return hit.selection
    plans = registry.plans(problem)
    if not plans and not (strategy == "auto" and registry.on_demand):
        raise registry.unsupported(problem)
    selection = _choose(registry, plans, problem, strategy, top_k)
    if key is not None:
        registry.selections.put(key, Decision(selection, None, registry, registry.stamp()))
    return selection


def _choose(registry: KernelStore, plans: list[Plan], problem: GemmProblem | ConvProblem, strategy: str,
            top_k: int | None) -> Selection:
    arch = registry.arch
    if strategy in ("first_fit", "rules"):
        return choose(plans, problem, strategy, arch)
    model, why_not = cost_model.shipped_model(arch.name, problem)
    if strategy == "tune":
        return _tune(registry, plans, problem, top_k, model, why_not)
    if strategy == "ml":
        return choose(plans, problem, strategy, arch, model=model, why_not=why_not)
    device = registry.default_device()
    hit = registry.tuning_db.lookup(registry.device_name(device), problem.signature())
    ranked_space = space.ranking(registry, problem, model, why_not)
    if ranked_space is not None:
        return _auto_space(registry, ranked_space, problem, device, hit)
    if not plans:
        raise registry.unsupported(problem)
    tuned = None if hit is None else tuned_plan(plans, _db_label(hit), hit.get("timings_ms"))
    if tuned is not None:
        return tuned
    ranking = by_model_or_rules(plans, problem, arch, model, why_not)
    why = unsure(ranking)
    if why is not None and _can_measure(device):
        plans = to_measure(ranking, settings.measure_top_k(op_of(problem)))
        return _measure(registry, plans, problem, device, why)
    return from_ranking(ranking)


def _auto_space(registry: KernelStore, ranked: space.SpaceRanking, problem: GemmProblem | ConvProblem,
                device: Any, hit: dict | None) -> Selection:
    """`auto` over the ranking of the declared space (dispatch/space.py): the tuning DB's winner, else the top
    k timed when unsure (compiled on demand), else the best plan that builds."""
    if hit is not None:
        found = space.tuned(registry, ranked, _db_label(hit))
        if found is not None:
            plan, report = found
            chosen = tuned_plan([plan], plan.label, hit.get("timings_ms"))
            if chosen is not None:
                return space.describe(registry, chosen, ranked, report)
    why = unsure(ranked.ranking)
    if why is not None and _can_measure(device):
        plans, report = space.to_measure(registry, ranked, settings.measure_top_k(op_of(problem)))
        if plans:
            return space.describe(registry, _measure(registry, plans, problem, device, why), ranked, report)
    return space.pick(registry, ranked)


def _db_label(hit: dict) -> str:
    """The plan a tuning DB entry names under the current vendor settings (selector.db_winner)."""
    return db_winner(hit, settings.vendor_margin(), settings.vendor_plans())


def _can_measure(device: Any) -> bool:
    """Unsure -> measure runs on a GPU (not Triton's interpreter), when allowed, and never while a CUDA graph
    is being captured (timing would break the capture)."""
    if device.type != "cuda" or not settings.measure_when_unsure() or settings.force_interpreter():
        return False
    import torch

    return not torch.cuda.is_current_stream_capturing()


def _measure(registry: KernelStore, plans: list[Plan], problem: GemmProblem | ConvProblem, device: Any,
             why: str) -> Selection:
    """`auto` when unsure: time the candidate plans once with a short budget, remember the winner in the
    tuning DB (later calls of the problem, in any process sharing the DB, are a lookup)."""
    from tiledispatch.bench.tune import time_plans

    winner, timings = time_plans(plans, problem, device, quick=True)
    db = registry.tuning_db
    db.store(registry.device_name(device), problem.signature(), winner.label, timings)
    return measured(winner, timings, str(db.path), "measured", why)


def _tune(registry: KernelStore, plans: list[Plan], problem: GemmProblem | ConvProblem, top_k: int | None,
          model: Any, why_not: str) -> Selection:
    """Time the top-k plans of the ranking on the current device and store the winner in the tuning DB."""
    from tiledispatch.bench.tune import time_plans

    ranking = by_model_or_rules(plans, problem, registry.arch, model, why_not)
    device = registry.default_device()
    winner, timings = time_plans(to_time(ranking, top_k), problem, device)
    db = registry.tuning_db
    db.store(registry.device_name(device), problem.signature(), winner.label, timings)
    return measured(winner, timings, str(db.path))
