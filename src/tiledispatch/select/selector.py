"""Selection, pure: plans in, choice out. Strategies, each callable alone, chained by `auto`: tuning DB ->
cost model -> rules -> first_fit. Measuring (`tune`) lives with the timers (bench/tune.py); dispatch calls it
and hands the timings back to `measured`."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from tiledispatch import settings
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.kernels.family import least_padded
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.select import conv_rules, rules

if TYPE_CHECKING:
    from tiledispatch.arch.spec import ArchSpec
    from tiledispatch.registry.kernel import Kernel

STRATEGIES = ("auto", "first_fit", "rules", "ml", "tune")
DEFAULT_TOP_K = 8          # tune without a cost model: the rules' top 8
MODEL_TOP_K = 5            # tune with a cost model: confirm its top 5
# the unit of Selection.ranking's scores, by the source of the ranking
UNITS = {"first_fit": "registry order", "rules": "us predicted", "ml": "model score (lower is better)",
         "tune": "ms measured", "measured": "ms measured", "tuning_db": ""}


@dataclasses.dataclass
class Selection:
    """The chosen plan, the strategy that decided, why (notes) and the ranking it came from (scores in
    `ranking_unit`, lower is better)."""

    kernel: Kernel
    strategy: str                 # the strategy that decided
    problem: GemmProblem | ConvProblem   # the problem the kernel runs (differs from the request when padded)
    padded: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)
    ranking: list[tuple[str, float]] = dataclasses.field(default_factory=list)   # (plan label, score)
    ranking_unit: str = ""
    # when `auto` ranked the declared space: where the pick came from and what its first use compiled (see
    # dispatch/space.py, SpaceReport.to_dict); None when only built kernels were ranked
    space: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel.name, "strategy": self.strategy, "padded": self.padded,
                "notes": self.notes, "ranking_unit": self.ranking_unit,
                "ranking": [{"kernel": n, "score": s} for n, s in self.ranking], "space": self.space}

    def copy(self) -> Selection:
        """A copy whose lists the caller may change (remembered selections are shared)."""
        return dataclasses.replace(self, notes=list(self.notes), ranking=list(self.ranking),
                                   space=None if self.space is None else dict(self.space))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A way to compute the request: a kernel run directly, or on zero-padded operands (`problem` is then the
    padded problem, see GemmProblem.padded)."""

    kernel: Kernel
    problem: GemmProblem | ConvProblem
    padded: bool = False

    @property
    def label(self) -> str:
        return self.kernel.name + (" (padded)" if self.padded else "")


def plan_for(kernel: Kernel, problem: GemmProblem | ConvProblem) -> Plan | None:
    """How `kernel` computes `problem`: directly, else on the least padded operands it supports (a GEMM whose
    align is too low, see validity.least_padded), else None. The one rule of registry plans, sweeps and
    offline checks."""
    if kernel.is_supported(problem):
        return Plan(kernel, problem)
    cfg = kernel.config
    padded = (least_padded(cfg, problem) if isinstance(problem, GemmProblem) and isinstance(cfg, GemmConfig)
              else None)
    return Plan(kernel, padded, True) if padded is not None else None


def plans_of(kernels: list[Kernel], problem: GemmProblem | ConvProblem) -> list[Plan]:
    """The plan of every kernel that computes `problem` (plan_for), direct ones first, each group in the
    kernels' order; no vendor plan when TILEDISPATCH_VENDOR=0 (read here, when a decision is made)."""
    if not settings.vendor_plans():
        kernels = [k for k in kernels if k.config.family != "vendor"]
    found = [plan for plan in (plan_for(k, problem) for k in kernels) if plan is not None]
    return [p for p in found if not p.padded] + [p for p in found if p.padded]


def first_fit(plans: list[Plan]) -> list[tuple[Plan, float]]:
    return [(plan, float(i)) for i, plan in enumerate(plans)]


def is_vendor(plan: Plan) -> bool:
    """Whether a plan runs the vendor library (cuBLAS / cuDNN through torch): no rule or model prices it."""
    return plan.kernel.config.family == "vendor"


def by_rules(plans: list[Plan], request: GemmProblem | ConvProblem,
             arch: ArchSpec) -> list[tuple[Plan, float]]:
    """Plans ranked by the analytic estimate (µs), padding copies priced in. Vendor plans have no estimate:
    they are ranked only when no other plan exists (in registry order, score 0)."""
    ours = [plan for plan in plans if not is_vendor(plan)]
    if not ours:
        return first_fit(plans)
    plans = ours
    if isinstance(request, ConvProblem):
        scored = [(plan,
                   conv_rules.estimate_us(cast(ConvConfig, plan.kernel.config),
                                          cast(ConvProblem, plan.problem),
                                                arch)) for plan in plans]
        return sorted(scored, key=lambda pair: pair[1])
    pad_us: dict[Any, float] = {}    # one estimate per padded problem (two at most)
    scored = []
    for plan in plans:
        problem = cast(GemmProblem, plan.problem)
        if plan.padded and problem not in pad_us:
            pad_us[problem] = rules.padding_us(request, problem, arch)
        extra = pad_us[problem] if plan.padded else 0.0
        scored.append((plan, rules.estimate_us(cast(GemmConfig, plan.kernel.config), problem, arch) + extra))
    return sorted(scored, key=lambda pair: pair[1])


@dataclasses.dataclass
class Ranking:
    """Plans ranked best first (with scores), which strategy ranked them, why; and the plans the cost model
    cannot judge (kernel kinds absent from its training data), which it leaves out of the ranking."""

    ranked: list[tuple[Plan, float]]
    source: str                   # 'ml' or 'rules'
    note: str
    unranked: list[Plan] = dataclasses.field(default_factory=list)


def by_model_or_rules(plans: list[Plan], request: GemmProblem | ConvProblem, arch: ArchSpec, model: Any,
                      why_not: str = "no cost model") -> Ranking:
    """`model` (the shipped cost model of the request, or None: `why_not`) ranks the plans of kernel kinds it
    was trained on; without a model, or when it knows none of the plans, the rules rank them all."""
    from tiledispatch.ml.model import kernel_kind

    vendor = [plan for plan in plans if is_vendor(plan)]
    if model is None:
        if len(vendor) < len(plans):   # vendor plans: left for measuring, as kinds no model knows
            return Ranking(by_rules(plans, request, arch), "rules", f"{why_not}; ranked by rules", vendor)
        return Ranking(by_rules(plans, request, arch), "rules", f"{why_not}; ranked by rules")
    known = [plan for plan in plans if not is_vendor(plan) and model.knows(plan.kernel.config)]
    unknown = [plan for plan in plans if is_vendor(plan) or not model.knows(plan.kernel.config)]
    kinds = ", ".join(sorted({kernel_kind(plan.kernel.config) for plan in unknown}))
    if not known:
        return Ranking(by_rules(plans, request, arch), "rules",
                       f"the cost model ({model.describe()}) was trained on none of the candidates' kernel "
                       f"kinds ({kinds}); ranked by rules", vendor if len(vendor) < len(plans) else [])
    note = f"ranked by the cost model ({model.describe()})"
    if unknown:
        note += f"; {len(unknown)} candidate(s) of kernel kinds it was not trained on ({kinds}) not ranked"
    scores = model.scores(request, [plan.kernel.config for plan in known], arch)   # padding is a feature
    ranked = sorted(zip(known, (float(s) for s in scores)), key=lambda pair: pair[1])
    return Ranking(ranked, "ml", note, unknown)


def to_time(ranking: Ranking, top_k: int | None) -> list[Plan]:
    """The plans `tune` times: the top k of the ranking (k=None: all; the default k is MODEL_TOP_K when a
    cost model ranked), plus every plan the model could not judge."""
    ranked = [plan for plan, _ in ranking.ranked]
    if top_k == DEFAULT_TOP_K and ranking.source == "ml":
        top_k = MODEL_TOP_K
    return (ranked if top_k is None else ranked[: max(1, top_k)]) + ranking.unranked


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise bad_choice(BadInput, "strategy", strategy, STRATEGIES)


def choose(plans: list[Plan], request: GemmProblem | ConvProblem, strategy: str, arch: ArchSpec, *,
           tuned: str | None = None, model: Any = None, why_not: str = "no cost model") -> Selection:
    """The choice of every strategy but `tune` (see `measured`). `tuned`: the plan label the tuning DB holds
    for the request (auto); `model` / `why_not`: the shipped cost model of the request or why there is
    none."""
    check_strategy(strategy)
    if strategy == "tune":
        raise BadInput("strategy 'tune' measures: dispatch times the plans and calls selector.measured",
                       field="strategy")
    if strategy == "first_fit":
        return _selection(plans[0], "first_fit", first_fit(plans))
    if strategy == "auto" and tuned is not None:
        hit = tuned_plan(plans, tuned)
        if hit is not None:
            return hit
    if strategy == "rules":
        ranked = by_rules(plans, request, arch)
        return _selection(ranked[0][0], "rules", ranked)
    # ml, or auto without a DB hit
    return from_ranking(by_model_or_rules(plans, request, arch, model, why_not))


def fastest(plans: list[Plan], timings: dict[str, float], vendor_margin: float) -> Plan:
    """The fastest timed plan, except that the vendor's plan keeps the pick unless one of ours beats it by
    more than `vendor_margin` (a fraction of the vendor's time): a tie or timer noise goes to cuBLAS / cuDNN,
    so a measured pick is not slower than the vendor by the noise of a short timing."""
    by_label = {plan.label: plan for plan in plans}
    ours = {plan.label: timings[plan.label] for plan in plans if not is_vendor(plan)}
    theirs = {plan.label: timings[plan.label] for plan in plans if is_vendor(plan)}
    return by_label[_with_margin(ours, theirs, vendor_margin)]


def _with_margin(ours: dict[str, float], theirs: dict[str, float], vendor_margin: float) -> str:
    """`fastest`'s rule over labels and times (ms): our fastest unless the vendor's fastest is within
    vendor_margin of it (or faster); either side may be empty, not both."""
    if not ours:
        return min(theirs, key=theirs.__getitem__)
    best = min(ours, key=ours.__getitem__)
    if not theirs:
        return best
    vendor = min(theirs, key=theirs.__getitem__)
    return best if ours[best] < theirs[vendor] * (1.0 - vendor_margin) else vendor


def db_winner(hit: dict, vendor_margin: float, vendor_allowed: bool) -> str:
    """The label a tuning DB entry picks under this process's vendor settings: its kept timings decided again
    as `fastest` does (the entry may come from a process with another TILEDISPATCH_VENDOR_MARGIN, or with
    the vendor off); the stored winner when the entry kept no timings of ours."""
    timings = {label: float(ms) for label, ms in (hit.get("timings_ms") or {}).items() if ms == ms and ms > 0}
    ours = {label: ms for label, ms in timings.items() if not label.startswith("vendor-")}
    if not ours:
        return hit["kernel"]
    theirs = {label: ms for label, ms in timings.items() if label not in ours} if vendor_allowed else {}
    return _with_margin(ours, theirs, vendor_margin)


def tuned_plan(plans: list[Plan], label: str, timings: dict[str, float] | None = None) -> Selection | None:
    """The selection of the plan the tuning DB names (with the timings the DB kept, ms, as its ranking), or
    None when no plan has that label."""
    hit = next((plan for plan in plans if plan.label == label), None)
    if hit is None:
        return None
    chosen = _selection(hit, "tuning_db", [])
    if timings:
        chosen.ranking = sorted(timings.items(), key=lambda kv: kv[1])
        chosen.ranking_unit = UNITS["tune"]
    chosen.notes.append("measured winner from the tuning DB")
    return chosen


def measured_pair(selection: Selection, label: str) -> tuple[float, float] | None:
    """(chosen plan's ms, plan `label`'s ms) when the selection's ranking holds measured times of both (None
    otherwise)."""
    if selection.ranking_unit != UNITS["tune"]:
        return None
    times = dict(selection.ranking)
    chosen = times.get(selection.kernel.name + (" (padded)" if selection.padded else ""))
    other = times.get(label)
    return None if chosen is None or other is None else (chosen, other)


def margin_over(selection: Selection, label: str) -> float | None:
    """How many ms the chosen plan saves over the plan `label`, when the selection's ranking holds measured
    times of both (None otherwise)."""
    pair = measured_pair(selection, label)
    return None if pair is None else pair[1] - pair[0]


def from_ranking(ranking: Ranking, plan: Plan | None = None) -> Selection:
    """The top plan of a ranking (or `plan`, one of its plans), with the ranking and its note."""
    chosen = _selection(ranking.ranked[0][0] if plan is None else plan, ranking.source, ranking.ranked)
    chosen.notes.append(ranking.note)
    return chosen


def unsure(ranking: Ranking) -> str | None:
    """Why `auto` should time the top of this ranking rather than trust it (None: it is sure): plans the cost
    model cannot rank (kinds it was not trained on, vendor plans), or a ranking by the rules alone. The
    shipped models are rankers, whose scores carry no time unit, so a predicted margin is not used yet."""
    if ranking.unranked:
        return f"{len(ranking.unranked)} plan(s) of kinds the cost model cannot rank"
    if ranking.source == "rules" and len(ranking.ranked) > 1:
        return "ranked by the rules alone"
    return None


def to_measure(ranking: Ranking, top_k: int) -> list[Plan]:
    """The plans `auto` times when unsure: the ranking's top k and every plan the model cannot rank."""
    return [plan for plan, _ in ranking.ranked[:top_k]] + ranking.unranked


def measured(winner: Plan, timings: dict[str, float], where: str, strategy: str = "tune", why: str = ""
             ) -> Selection:
    """The selection of `tune` (or of `auto` when unsure: strategy 'measured'): the timed winner (`fastest`),
    with every timing (ms) as its ranking."""
    chosen = _selection(winner, strategy, [])
    chosen.ranking = sorted(timings.items(), key=lambda kv: kv[1])
    chosen.ranking_unit = UNITS["tune"]
    if chosen.ranking[0][0] != winner.label:
        chosen.notes.append(f"kept the vendor plan: {chosen.ranking[0][0]} was not faster by the margin")
    if why:
        chosen.notes.append(f"unsure: {why}")
    chosen.notes.append(f"timed {len(timings)} candidates (ms), winner stored in {where}")
    return chosen


def _selection(plan: Plan, strategy: str, ranking: list[tuple[Plan, float]]) -> Selection:
    notes = []
    if plan.padded:
        p = plan.problem
        notes.append(f"padded: runs as {p.m}x{p.n}x{p.k} on zero-padded copies "   # type: ignore[union-attr]
                     f"of the operands that need them (sizes along unit strides rounded up to multiples of "
                     f"{p.align}; exact, padded rows and columns are dropped)")
    return Selection(plan.kernel, strategy, plan.problem, plan.padded, notes,
                     [(p.label, round(score, 3)) for p, score in ranking], UNITS.get(strategy, ""))
