"""Selection strategies, each callable alone, chained by `auto`: tuning DB -> (model) -> rules -> first_fit."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.select import rules

if TYPE_CHECKING:
    from tiledispatch.registry.kernel import Kernel
    from tiledispatch.registry.registry import Registry

STRATEGIES = ("auto", "first_fit", "rules", "tune")
DEFAULT_TOP_K = 8


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


def first_fit(candidates: list[Kernel]) -> list[tuple[Kernel, float]]:
    return [(k, float(i)) for i, k in enumerate(candidates)]


def by_rules(registry: Registry, candidates: list[Kernel], problem: GemmProblem) -> list[tuple[Kernel, float]]:
    return rules.rank(candidates, problem, registry.arch)  # type: ignore[return-value]


def tune(registry: Registry, candidates: list[Kernel], problem: GemmProblem, top_k: int | None,
         device=None) -> tuple[Kernel, dict[str, float]]:
    """Time the top-k of the rules ranking on `device` (k=None: all) and store the winner in the tuning DB."""
    from tiledispatch.bench.timer import time_ms
    from tiledispatch.runtime.inputs import make_args

    device = device or registry.default_device()
    ranked = [k for k, _ in by_rules(registry, candidates, problem)]
    chosen = ranked if top_k is None else ranked[: max(1, top_k)]
    args = make_args(problem, device)
    timings: dict[str, float] = {}
    for kernel in chosen:
        out = kernel.launch(dataclasses.replace(args, out=None), problem)
        fixed = dataclasses.replace(args, out=out)
        timings[kernel.name] = time_ms(lambda: kernel.launch(fixed, problem), device)
    winner = min(chosen, key=lambda k: timings[k.name])
    registry.tuning_db.store(registry.device_name(device), problem.signature(), winner.name, timings)
    return winner, timings


def from_tuning_db(registry: Registry, candidates: list[Kernel], problem: GemmProblem) -> Kernel | None:
    hit = registry.tuning_db.lookup(registry.device_name(registry.default_device()), problem.signature())
    if hit is None:
        return None
    return next((k for k in candidates if k.name == hit["kernel"]), None)


def choose(registry: Registry, candidates: list[Kernel], problem: GemmProblem, strategy: str,
           top_k: int | None = DEFAULT_TOP_K) -> Selection:
    if strategy not in STRATEGIES:
        raise bad_choice(BadInput, "strategy", strategy, STRATEGIES)
    if strategy == "first_fit":
        ranking = first_fit(candidates)
        return Selection(ranking[0][0], "first_fit", problem, ranking=_names(ranking))
    if strategy == "tune":
        winner, timings = tune(registry, candidates, problem, top_k)
        return Selection(winner, "tune", problem, ranking=sorted(timings.items(), key=lambda kv: kv[1]),
                         notes=[f"timed {len(timings)} candidates (ms), winner stored in {registry.tuning_db.path}"])
    if strategy == "auto":
        hit = from_tuning_db(registry, candidates, problem)
        if hit is not None:
            return Selection(hit, "tuning_db", problem, notes=["measured winner from the tuning DB"])
    ranking = by_rules(registry, candidates, problem)
    notes = ["no cost model for this arch/op yet; ranked by rules"] if strategy == "auto" else []
    return Selection(ranking[0][0], "rules", problem, ranking=_names(ranking), notes=notes)


def _names(ranking: list[tuple[Kernel, float]]) -> list[tuple[str, float]]:
    return [(k.name, round(score, 3)) for k, score in ranking]
