"""Selection strategies, each callable alone, chained by `auto`: tuning DB -> (model) -> rules -> first_fit."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tiledispatch.configs.validity import least_padded
from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.select import conv_rules, rules

if TYPE_CHECKING:
    from tiledispatch.registry.kernel import Kernel
    from tiledispatch.registry.registry import Registry

STRATEGIES = ("auto", "first_fit", "rules", "ml", "tune")
DEFAULT_TOP_K = 8          # tune without a cost model: the rules' top 8
MODEL_TOP_K = 5            # tune with a cost model: confirm its top 5


@dataclasses.dataclass
class Selection:
    kernel: Kernel
    strategy: str                 # the strategy that decided
    problem: GemmProblem          # the problem the kernel runs (differs from the request when padded)
    padded: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)
    ranking: list[tuple[str, float]] = dataclasses.field(default_factory=list)   # (name, score µs or ms)

    def to_dict(self) -> dict:
        return {"kernel": self.kernel.name, "strategy": self.strategy, "padded": self.padded,
                "notes": self.notes, "ranking": [{"kernel": n, "score": s} for n, s in self.ranking]}


@dataclasses.dataclass(frozen=True)
class Plan:
    """A way to compute the request: a kernel run directly, or on zero-padded operands (`problem` is then the
    padded problem, see GemmProblem.padded)."""

    kernel: Kernel
    problem: GemmProblem
    padded: bool = False

    @property
    def label(self) -> str:
        return self.kernel.name + (" (padded)" if self.padded else "")


def plan_for(kernel: Kernel, problem: GemmProblem | ConvProblem) -> Plan | None:
    """How `kernel` computes `problem`: directly, else on the least padded operands it supports (a GEMM whose
    align is too low, see validity.least_padded), else None. The one rule of registry plans, sweeps and offline
    checks."""
    if kernel.is_supported(problem):
        return Plan(kernel, problem)
    padded = least_padded(kernel.config, problem) if isinstance(problem, GemmProblem) else None
    return Plan(kernel, padded, True) if padded is not None else None


def plans_of(kernels: list[Kernel], problem: GemmProblem | ConvProblem) -> list[Plan]:
    """The plan of every kernel that computes `problem` (plan_for), direct ones first, each group in the
    kernels' order."""
    found = [plan for plan in (plan_for(k, problem) for k in kernels) if plan is not None]
    return [p for p in found if not p.padded] + [p for p in found if p.padded]


def first_fit(plans: list[Plan]) -> list[tuple[Plan, float]]:
    return [(plan, float(i)) for i, plan in enumerate(plans)]


def by_rules(registry: Registry, plans: list[Plan], request: GemmProblem | ConvProblem
             ) -> list[tuple[Plan, float]]:
    if isinstance(request, ConvProblem):
        scored = [(plan, conv_rules.estimate_us(plan.kernel.config, plan.problem, registry.arch)) for plan in plans]
        return sorted(scored, key=lambda pair: pair[1])
    pad_us: dict[GemmProblem, float] = {}    # one estimate per padded problem (two at most)
    scored = []
    for plan in plans:
        if plan.padded and plan.problem not in pad_us:
            pad_us[plan.problem] = rules.padding_us(request, plan.problem, registry.arch)
        extra = pad_us[plan.problem] if plan.padded else 0.0
        scored.append((plan, rules.estimate_us(plan.kernel.config, plan.problem, registry.arch) + extra))
    return sorted(scored, key=lambda pair: pair[1])


@dataclasses.dataclass
class Ranking:
    """Plans ranked best first (with scores), which strategy ranked them, why; and the plans the cost model
    cannot judge (kernel kinds absent from its training data), which it leaves out of the ranking."""

    ranked: list[tuple[Plan, float]]
    source: str                   # 'ml' or 'rules'
    note: str
    unranked: list[Plan] = dataclasses.field(default_factory=list)


def by_model_or_rules(registry: Registry, plans: list[Plan], request: GemmProblem | ConvProblem) -> Ranking:
    """The shipped cost model of the request's (arch, op, direction, dtype) ranks the plans of kernel kinds it
    was trained on; without a matching model, or when it knows none of the plans, the rules rank them all."""
    from tiledispatch.ml.model import kernel_kind
    from tiledispatch.select import cost_model

    model, why_not = cost_model.shipped_model(registry.arch.name, request)
    if model is None:
        return Ranking(by_rules(registry, plans, request), "rules", f"{why_not}; ranked by rules")
    known = [plan for plan in plans if model.knows(plan.kernel.config)]
    unknown = [plan for plan in plans if not model.knows(plan.kernel.config)]
    kinds = ", ".join(sorted({kernel_kind(plan.kernel.config) for plan in unknown}))
    if not known:
        return Ranking(by_rules(registry, plans, request), "rules",
                       f"the cost model ({model.describe()}) was trained on none of the candidates' kernel kinds "
                       f"({kinds}); ranked by rules")
    note = f"ranked by the cost model ({model.describe()})"
    if unknown:
        note += f"; {len(unknown)} candidate(s) of kernel kinds it was not trained on ({kinds}) not ranked"
    return Ranking(cost_model.by_model(model, known, request, registry.arch), "ml", note, unknown)


def _plan_runner(plan: Plan, args):
    from tiledispatch.runtime.execute import run_selection

    selection = Selection(plan.kernel, "tune", plan.problem, plan.padded)
    out = run_selection(selection, dataclasses.replace(args, out=None))
    fixed = dataclasses.replace(args, out=out)
    return lambda: run_selection(selection, fixed)


def tune(registry: Registry, plans: list[Plan], request: GemmProblem, top_k: int | None,
         device=None) -> tuple[Plan, dict[str, float]]:
    """Time the top-k plans of the ranking (the cost model's, else the rules') on `device` (k=None: all),
    padding included, and store the winner in the tuning DB. Plans the cost model cannot judge are all timed
    too."""
    from tiledispatch.bench.timer import time_ms
    from tiledispatch.runtime.inputs import make_args

    device = device or registry.default_device()
    ranking = by_model_or_rules(registry, plans, request)
    ranked = [plan for plan, _ in ranking.ranked]
    if top_k == DEFAULT_TOP_K and ranking.source == "ml":
        top_k = MODEL_TOP_K
    chosen = (ranked if top_k is None else ranked[: max(1, top_k)]) + ranking.unranked
    if isinstance(request, ConvProblem):
        from tiledispatch.runtime.conv_reference import make_conv_args

        conv_args = make_conv_args(request, device)
        runner = lambda plan: (lambda: plan.kernel.launch(conv_args, plan.problem))  # noqa: E731
    else:
        args = make_args(request, device)
        runner = lambda plan: _plan_runner(plan, args)  # noqa: E731
    timings = {plan.label: time_ms(runner(plan), device) for plan in chosen}
    winner = min(chosen, key=lambda plan: timings[plan.label])
    registry.tuning_db.store(registry.device_name(device), request.signature(), winner.label, timings)
    return winner, timings


def from_tuning_db(registry: Registry, plans: list[Plan], request: GemmProblem) -> Plan | None:
    hit = registry.tuning_db.lookup(registry.device_name(registry.default_device()), request.signature())
    if hit is None:
        return None
    return next((plan for plan in plans if plan.label == hit["kernel"]), None)


def choose(registry: Registry, plans: list[Plan], request: GemmProblem, strategy: str,
           top_k: int | None = DEFAULT_TOP_K) -> Selection:
    if strategy not in STRATEGIES:
        raise bad_choice(BadInput, "strategy", strategy, STRATEGIES)
    if strategy == "first_fit":
        ranking = first_fit(plans)
        return _selection(ranking[0][0], "first_fit", ranking)
    if strategy == "tune":
        winner, timings = tune(registry, plans, request, top_k)
        chosen = _selection(winner, "tune", [])
        chosen.ranking = sorted(timings.items(), key=lambda kv: kv[1])
        chosen.notes.append(f"timed {len(timings)} candidates (ms), winner stored in {registry.tuning_db.path}")
        return chosen
    if strategy == "auto":
        hit = from_tuning_db(registry, plans, request)
        if hit is not None:
            chosen = _selection(hit, "tuning_db", [])
            chosen.notes.append("measured winner from the tuning DB")
            return chosen
    if strategy == "rules":
        ranking = by_rules(registry, plans, request)
        return _selection(ranking[0][0], "rules", ranking)
    ranking = by_model_or_rules(registry, plans, request)   # ml, or auto without a DB hit
    chosen = _selection(ranking.ranked[0][0], ranking.source, ranking.ranked)
    chosen.notes.append(ranking.note)
    return chosen


def _selection(plan: Plan, strategy: str, ranking: list[tuple[Plan, float]]) -> Selection:
    notes = []
    if plan.padded:
        notes.append(f"padded: runs as {plan.problem.m}x{plan.problem.n}x{plan.problem.k} on zero-padded copies "
                     f"of the operands that need them (sizes along unit strides rounded up to multiples of "
                     f"{plan.problem.align}; exact, padded rows and columns are dropped)")
    return Selection(plan.kernel, strategy, plan.problem, plan.padded, notes,
                     [(p.label, round(score, 3)) for p, score in ranking])
