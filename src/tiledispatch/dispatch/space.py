"""Rank the space, compile the winner: `auto` over every declared config of a key's full space.

A registry holds a built set (the default registries: the `_essential` preset, prebuilt and warm) and may hold
a space declared on demand (KernelStore.add / add_preset with on_demand=True; the default registries declare
the `_candidates` / `_all` preset of their key, `declare_space`). When the space is ranked (`enabled`), `auto`
ranks the plans of every declared kernel with the shipped cost model, built or not: a plan needs only the
config and its family's validity predicate (selector.plan_for). The first use of the pick compiles it, and the
runner-up alongside, through the build cache; a pick whose compile fails is recorded in KernelStore.failed and
the next plan of the ranking is used. When unsure, `auto` times its top k (settings.measure_top_k), built on
demand. Without a shipped model for the request, or one that knows none of the space's kernel kinds, `auto`
ranks the built set as before. Selection stays pure: the ranking is select/selector.py's, compiling is the
registry's. A ranking of the space is remembered per problem while no kernel is declared, so deciding again
after an unrelated build (which changes every stamp) costs a walk, not a ranking (docs/design/rank_space.md).
"""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from tiledispatch import settings
from tiledispatch.errors import CompileError
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.registry.store import BuildReport, KernelStore
from tiledispatch.select.selector import Plan, Ranking, Selection, by_model_or_rules, from_ranking

if TYPE_CHECKING:
    from tiledispatch.registry.kernel import Kernel

MAX_FAILURES = 4   # failed on-demand compiles one selection goes past before it takes built plans only
RUNNER_UP = 1      # plans compiled along with the pick (a warm fallback, and the next to time)


def enabled(registry: KernelStore) -> bool:
    """Whether `auto` ranks the registry's declared space: as TILEDISPATCH_RANK_SPACE says, else on for a
    CUDA registry and off under the interpreter (where compiling a pick per new problem costs minutes).
    A converted model's first step pays for its on-demand compiles once per cache (rank_space.md)."""
    setting = settings.rank_space()
    if setting is not None:
        return setting
    return not settings.force_interpreter() and registry.default_device().type == "cuda"


def declare_space(registry: KernelStore, preset: str, problem: GemmProblem | ConvProblem,
                  epilogue: Epilogue | tuple[str, bool] | None) -> str | None:
    """Declare, on demand, the full space of the `_essential` preset `preset` (presets.space_of), specialised
    to `epilogue`, when the space is ranked and a shipped cost model serves the problem's key; returns the
    space preset's name, or None when nothing was declared (the registry then keeps today's behaviour)."""
    from tiledispatch.presets import space_of
    from tiledispatch.select import cost_model

    name = space_of(preset)
    if name is None or not enabled(registry):
        return None
    model, _ = cost_model.shipped_model(registry.arch.name, problem)
    if model is None:
        return None
    registry.add_preset(name, epilogue, on_demand=True)
    return name


@dataclasses.dataclass
class SpaceRanking:
    """The cost model's ranking of a registry's declared space for one problem."""

    ranking: Ranking
    seconds: float          # what ranking it took (the first time)
    kernels: int            # declared kernels it ranked from

    def candidates(self) -> list[Plan]:
        return [plan for plan, _ in self.ranking.ranked] + self.ranking.unranked


def ranking(registry: KernelStore, problem: GemmProblem | ConvProblem, model: Any,
            why_not: str) -> SpaceRanking | None:
    """The ranking of the registry's whole space for `problem`, or None when `auto` ranks the built set: no
    kernel declared on demand, the space not ranked (`enabled`), no model, or a model that knows none of the
    space's kernel kinds (the rules then rank the built set, as without a space)."""
    if model is None or not registry.on_demand or not enabled(registry):
        return None
    version = registry.declared_version()
    hit = registry.rankings.get(problem)
    if hit is not None and hit[0] == version:
        return hit[1]
    start = time.perf_counter()
    plans = registry.space_plans(problem)
    ranked = by_model_or_rules(plans, problem, registry.arch, model, why_not) if plans else None
    found = (SpaceRanking(ranked, time.perf_counter() - start, len(registry))
             if ranked is not None and ranked.source == "ml" else None)
    registry.rankings.put(problem, (version, found))
    return found


@dataclasses.dataclass
class SpaceReport:
    """What making the picked plans ready took: kernels compiled now, read from the build cache (or the active
    bundle, a read-only layer of it), failed."""

    compiled: list[str] = dataclasses.field(default_factory=list)
    cached: list[str] = dataclasses.field(default_factory=list)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def add(self, build: BuildReport) -> None:
        self.compiled += build.built
        self.cached += build.cached + build.from_bundle
        self.failed.update(build.failed)
        self.seconds += build.seconds


def ready(registry: KernelStore, ranked: list[Plan], count: int, ahead: int = 0
          ) -> tuple[list[Plan], SpaceReport]:
    """The first `count` plans of `ranked` that are built or compile now, best first, and what compiling took.
    Unbuilt plans are compiled in one parallel batch per step, with up to `ahead` further unbuilt plans (the
    runner-up); a failed compile is recorded and its plan skipped; past MAX_FAILURES failures only built
    plans are taken. Plans whose kernel failed before are never retried."""
    report = SpaceReport()
    chosen: list[Plan] = []
    failed = registry.failed
    i = 0
    while len(chosen) < count and i < len(ranked):
        step = count - len(chosen)
        batch = [plan for plan in ranked[i: i + step] if plan.kernel.name not in failed]
        i += step
        lazy = _unbuilt(plan.kernel for plan in batch)
        if lazy and len(report.failed) < MAX_FAILURES:
            extra = _unbuilt(plan.kernel for plan in ranked[i: i + ahead] if plan.kernel.name not in failed)
            report.add(registry.compile_on_demand(lazy + [k for k in extra if k not in lazy]))
        chosen += [plan for plan in batch if plan.kernel.built]
    return chosen, report


def _unbuilt(kernels: Any) -> list[Kernel]:
    out: list[Kernel] = []
    for kernel in kernels:
        if not kernel.built and kernel not in out:
            out.append(kernel)
    return out


def pick(registry: KernelStore, space: SpaceRanking) -> Selection:
    """`auto`'s choice from a ranking of the space when it does not measure: the best plan that is built or
    compiles (with the runner-up compiled along)."""
    ranked = [plan for plan, _ in space.ranking.ranked]
    chosen, report = ready(registry, ranked, 1, RUNNER_UP)
    if not chosen:
        raise no_plan(report)
    ranking = dataclasses.replace(space.ranking, ranked=[
        (plan, score) for plan, score in space.ranking.ranked if plan.kernel.name not in registry.failed])
    return describe(registry, from_ranking(ranking, chosen[0]), space, report)


def no_plan(report: SpaceReport) -> CompileError:
    reasons = "; ".join(f"{name}: {why}" for name, why in list(report.failed.items())[:3])
    return CompileError(f"no plan of the ranked space could be built: {len(report.failed)} on-demand "
                        f"compile(s) failed ({reasons}) and no built plan supports the problem",
                        field="kernel")


def describe(registry: KernelStore, selection: Selection, space: SpaceRanking, report: SpaceReport
             ) -> Selection:
    """Add to a selection where its kernel came from (the prebuilt set or the space, compiled on demand now
    or earlier) and what this selection compiled (Selection.space, and a note)."""
    name = selection.kernel.name
    on_demand = registry.is_on_demand(name)
    ranked = len(space.ranking.ranked) + len(space.ranking.unranked)
    selection.space = {
        "ranked": ranked, "declared": space.kernels, "on_demand": len(registry.on_demand),
        "rank_s": round(space.seconds, 6),
        "pick": "on_demand" if on_demand else "prebuilt",
        "compiled": report.compiled, "cached": report.cached, "failed": dict(report.failed),
        "compile_s": round(report.seconds, 3),
        "first_use_s": round(registry.compiled_on_demand.get(name, 0.0), 3) if on_demand else 0.0,
    }
    text = (f"ranked the declared space ({ranked} plans of {space.kernels} declared kernels, "
            f"{len(registry.on_demand)} of them on demand) in {space.seconds * 1e3:.1f} ms")
    if not on_demand:
        text += "; the pick is prebuilt"
    elif name in report.compiled:
        text += f"; the pick was compiled on demand in {report.seconds:.2f} s"
    elif name in report.cached:
        text += f"; the pick was read from the build cache in {report.seconds:.2f} s"
    else:
        text += (f"; the pick was compiled on demand earlier (its first use waited "
                 f"{registry.compiled_on_demand.get(name, 0.0):.2f} s)")
    others = [n for n in report.compiled + report.cached if n != name]
    if others:
        text += f", with {', '.join(others)}"
    selection.notes.append(text)
    if report.failed:
        selection.notes.append(f"skipped {len(report.failed)} plan(s) whose on-demand compile failed: "
                               + "; ".join(f"{n}: {why}" for n, why in report.failed.items()))
    return selection


def to_measure(registry: KernelStore, space: SpaceRanking, top_k: int) -> tuple[list[Plan], SpaceReport]:
    """The plans `auto` times when unsure over the space: the top k of the ranking that are built or compile
    (compiled on demand, at most k at a time), and the plans the model cannot rank that are built (the vendor
    library, prebuilt kernels of kinds it was not trained on); unbuilt plans it cannot rank are left out."""
    ranked = [plan for plan, _ in space.ranking.ranked]
    chosen, report = ready(registry, ranked, top_k)
    return chosen + [plan for plan in space.ranking.unranked if plan.kernel.built], report


def tuned(registry: KernelStore, space: SpaceRanking, label: str) -> tuple[Plan, SpaceReport] | None:
    """The space's plan the tuning DB names, made ready (compiled on demand when a process before this one
    picked it from the space), or None when no plan has that label or it does not build."""
    plan = next((p for p in space.candidates() if p.label == label), None)
    if plan is None:
        return None
    chosen, report = ready(registry, [plan], 1)
    return (chosen[0], report) if chosen else None
