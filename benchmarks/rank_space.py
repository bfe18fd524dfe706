"""Rank the space, compile the winner (issue 36, item 2), on a GPU: the first-call cost of a cold pick and the
selection quality of `auto` over the full space vs over the prebuilt essential presets.

Per key (GEMM dtype; conv direction and ndim), on layers of model definitions outside the conv training
suites (problems/models.py: EfficientNet-B0, MobileNetV3, ConvNeXt-T, RegNetY, R(2+1)D, ir-CSN, 3-D
MobileNetV2) and on LLM projection GEMMs (LLM_PROJECTIONS) at several token counts:

1. cold: a registry as td.gemm / td.conv* build it (the essential preset built, the `_candidates` / `_all`
   space declared on demand), in a fresh build cache, TILEDISPATCH_MEASURE=0 (the model's pick, no timing):
   `auto` select of each problem in turn, timed: total, ranking and compile seconds, whether the pick was
   cold (compiled on demand), and a warm repeat (µs: the memo);
2. oracle: the whole space built (in a second cache) and every plan of each problem timed
   (bench.tune.time_plans, quick budget: bench.tune.QUICK_RULE; runs before 2026-11-27 used do_bench), the
   vendor library (cuBLAS / cuDNN through torch) too;
3. efficiency = fastest plan / time of the pick, for the space pick, the essential-only pick (the model's top
   over the essential kernels: TILEDISPATCH_RANK_SPACE=0), the model's top and the rules' top over every plan
   built, the space's top 3 timed (what unsure -> measure keeps with TILEDISPATCH_MEASURE_TOP_K=3), and the
   vendor.

    python benchmarks/rank_space.py --ops gemm [--count 24] [--out benchmarks/results/rank_space_<gpu>.json]
    python benchmarks/rank_space.py --ops conv --directions fwd --ndims 3 [--count 12]

--zoo PATH takes the problems of a key from the unseen zoo (tools/zoo_corpus.py) instead, --start / --count a
slice of them (seeded order), stored under the key `<key>@zoo<start>-<end>`; --summarize OUT pools the rows
of every slice of a key and prints mean / median / P10 / worst per key.

Keys of one call are measured interleaved, in proportion to their sizes, and --out is rewritten after every
problem (results merge by key; an interrupt or --deadline-s keeps what was measured, a zoo slice's key then
names the problems done). --cold N makes step 1 cover the first N problems of a key only (the rest take the
model's top over the built space, which is `auto`'s pick once compiled); --keep-times stores every plan's
time, so that tools/zoo_offline.py can rank the same plans with another model. On 16 cores a whole conv
direction of the zoo (400 problems, 2-D and 3-D) took about 7 minutes on an H200, most of it timing.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GEMM_MODELS = ("llama3_8b", "qwen2_5_0_5b", "phi3_mini", "mixtral_8x7b", "gemma2_9b")
GEMM_TOKENS = (1, 16, 128, 2048)
CONV_MODELS = ("efficientnet_b0", "mobilenet_v3_large", "convnext_tiny", "regnety_1_6gf", "r2plus1d_18",
               "ir_csn_101", "mobilenet_v2_3d")
BATCH = {1: 8, 2: 8, 3: 2}
TOP = 3


def gemm_problems(dtype: str, count: int, seed: int) -> list[Any]:
    import tiledispatch as td
    from tiledispatch.problems.models import LLM_PROJECTIONS

    shapes = sorted({(m, n, k) for model in GEMM_MODELS for _, (n, k) in LLM_PROJECTIONS[model]
                     for m in GEMM_TOKENS})
    random.Random(seed).shuffle(shapes)
    return [td.GemmProblem(m, n, k, dtype=dtype) for m, n, k in shapes[:count]]


def conv_problems(direction: str, ndim: int, dtype: str, count: int, seed: int) -> list[Any]:
    from tiledispatch.problems.conv_suites import problem_of, with_direction
    from tiledispatch.problems.models import CONV_MODELS as TABLES

    layers = [layer for model in CONV_MODELS for layer in TABLES[model]() if len(layer.spatial) == ndim]
    problems = list(dict.fromkeys(with_direction(problem_of(layer, BATCH[ndim], dtype), direction)
                                  for layer in layers))
    random.Random(seed).shuffle(problems)
    return problems[:count]


def zoo_problems(path: Path, dtype: str, seed: int, direction: str | None = None, ndim: int = 0
                 ) -> list[Any]:
    """The GEMMs (direction None) or the conv problems of one direction and ndim of an unseen-zoo file
    (tools/zoo_corpus.py), in a seeded order."""
    import tiledispatch as td

    zoo = json.loads(path.read_text())
    if zoo.get("kind") != "tiledispatch-unseen-zoo" or zoo.get("dtype") != dtype:
        sys.exit(f"{path}: not an unseen zoo of dtype {dtype} (kind {zoo.get('kind')!r}, dtype "
                 f"{zoo.get('dtype')!r})")
    problems: list[Any]
    if direction is None:
        problems = [td.GemmProblem.from_dict(e["problem"]) for e in zoo["gemm"]]
    else:
        problems = [p for p in (td.ConvProblem.from_dict(e["problem"]) for e in zoo["conv"][direction])
                    if p.ndim == ndim]
    random.Random(seed).shuffle(problems)
    return problems


def essential_preset(problem: Any) -> str:
    from tiledispatch.problems.conv import ConvProblem

    if isinstance(problem, ConvProblem):
        return f"conv_{problem.direction}_{problem.dtype}_{problem.ndim}d_essential"
    return f"gemm_{problem.dtype}_{problem.layout}_essential"


def epilogue(problem: Any) -> Any:
    from tiledispatch.problems.conv import ConvProblem

    return (problem.activation, problem.bias) if isinstance(problem, ConvProblem) else problem.epilogue


def cold_picks(problems: list[Any], cache: Path, workers: int) -> list[dict[str, Any]]:
    """Step 1: the first `auto` select of each problem on a default-like registry in a fresh cache."""
    import tiledispatch as td
    from tiledispatch.dispatch import decide
    from tiledispatch.dispatch.space import declare_space

    preset = essential_preset(problems[0])
    registry = td.Registry(cache_dir=cache, tuning_db=cache / "tuning.json")
    registry.add_preset(preset, epilogue(problems[0]))
    start = time.perf_counter()
    report = registry.build(max_workers=workers)
    print(f"{preset}: essential build {report} ({time.perf_counter() - start:.1f} s)", flush=True)
    space = declare_space(registry, preset, problems[0], epilogue(problems[0]))
    if space is None:
        raise SystemExit(f"{preset}: no space ranked (no shipped cost model, or TILEDISPATCH_RANK_SPACE=0)")
    rows = []
    for problem in problems:
        start = time.perf_counter()
        chosen = decide.select(registry, problem, "auto")
        total = time.perf_counter() - start
        warm = []
        for _ in range(200):
            t0 = time.perf_counter()
            decide.select(registry, problem, "auto")
            warm.append(time.perf_counter() - t0)
        info = chosen.space or {}
        label = chosen.kernel.name + (" (padded)" if chosen.padded else "")
        rows.append({"problem": problem.signature(), "pick": label,
                     "cold": bool(info.get("compiled") or info.get("cached")),
                     "from_space": info.get("pick") == "on_demand", "select_s": total,
                     "rank_s": info.get("rank_s"), "compile_s": info.get("compile_s"),
                     "compiled": info.get("compiled"), "failed": info.get("failed"),
                     "warm_select_us": statistics.median(warm) * 1e6,
                     "space_top": [name for name, _ in chosen.ranking[:TOP]]})
        print(f"  {problem.describe()}: {rows[-1]['pick']} select {total:.2f} s (compile "
              f"{rows[-1]['compile_s']} s), warm {rows[-1]['warm_select_us']:.1f} us", flush=True)
    return rows


def declare_oracle(registry: Any, first: Any, on_demand: bool = False) -> set[str]:
    """Declare in `registry` what step 2 times for `first`'s key: the essential preset, the whole space and
    the vendor plan (on_demand: declared, not built); returns the names of the essential kernels."""
    from tiledispatch.configs.vendor import VendorConfig
    from tiledispatch.presets import load_preset, space_of
    from tiledispatch.problems.conv import ConvProblem

    preset = essential_preset(first)
    registry.add_preset(preset, epilogue(first), on_demand=on_demand)
    registry.add_preset(space_of(preset), epilogue(first), on_demand=on_demand)
    conv = isinstance(first, ConvProblem)
    registry.add(VendorConfig("conv", first.direction) if conv else VendorConfig("gemm"), on_demand=on_demand)
    return {cfg.with_epilogue(*epilogue(first)).name if conv else cfg.with_epilogue(epilogue(first)).name
            for cfg in load_preset(preset)}


def oracle_registry(first: Any, cache: Path, workers: int) -> tuple[Any, set[str]]:
    """Step 2's registry (declare_oracle) built in `cache`; and the names of the essential kernels."""
    import tiledispatch as td

    registry = td.Registry(cache_dir=cache)
    essential = declare_oracle(registry, first)
    start = time.perf_counter()
    report = registry.build(max_workers=workers)
    seconds = time.perf_counter() - start
    print(f"{essential_preset(first)}: oracle build {report} ({seconds:.1f} s)", flush=True)
    return registry, essential


def measure(problem: Any, row: dict[str, Any] | None, registry: Any, essential: set[str],
            keep_times: bool = False) -> dict[str, Any]:
    """Steps 2 and 3 for one problem: every plan timed; the efficiencies of the picks. Without a cold-pick
    `row`, the space pick is the model's top over every plan built (what `auto` picks once compiled).
    keep_times: the row keeps every plan's ms (to rank the same plans with another model offline)."""
    from tiledispatch.bench.tune import time_plans
    from tiledispatch.select import cost_model
    from tiledispatch.select.selector import by_model_or_rules, is_vendor

    plans = registry.plans(problem)
    _, times = time_plans(plans, problem, registry.default_device(), quick=True)
    ours = {label: ms for label, ms in times.items() if not label.startswith("vendor")}
    best = min(ours.values())
    model, why = cost_model.shipped_model(registry.arch.name, problem)
    ess_pick = by_model_or_rules([p for p in plans if p.kernel.name in essential], problem, registry.arch,
                                 model, why).ranked[0][0].label
    built = [p for p in plans if not is_vendor(p)]
    model_ranking = by_model_or_rules(built, problem, registry.arch, model, why).ranked
    model_pick = model_ranking[0][0].label
    rules_pick = by_model_or_rules(built, problem, registry.arch, None, "rules").ranked[0][0].label
    if row is None:
        row = {"problem": problem.signature(), "pick": model_pick, "cold": False, "from_space": None,
               "space_top": [plan.label for plan, _ in model_ranking[:TOP]]}
    vendor = [ms for label, ms in times.items() if label.startswith("vendor")]
    top = [times[n] for n in row["space_top"] if n in times]
    row.update(plans=len(ours), best_ms=best, oracle=min(ours, key=ours.get), essential_pick=ess_pick,
               eff_space=best / times[row["pick"]] if row["pick"] in times else None,
               eff_essential=best / times[ess_pick], eff_space_top3=best / min(top) if top else None,
               model_pick=model_pick, eff_model=best / times[model_pick] if model_pick in times else None,
               rules_pick=rules_pick, eff_rules=best / times[rules_pick] if rules_pick in times else None,
               eff_vendor=best / vendor[0] if vendor else None)
    if keep_times:
        row["times"] = {label: float(f"{ms:.4g}") for label, ms in times.items()}
    print(f"  {problem.describe()}: space {row['eff_space']} essential {row['eff_essential']:.3f} "
          f"top3 {row['eff_space_top3']}", flush=True)
    return row


def distribution(values: list[float]) -> dict[str, float]:
    """mean / median / P10 / worst of efficiencies ({} for none); P10 is the value at index 10% of the
    sorted list (no interpolation)."""
    values = sorted(values)
    if not values:
        return {}
    return {"mean": statistics.fmean(values), "median": statistics.median(values),
            "p10": values[int(0.1 * (len(values) - 1))], "worst": values[0]}


def read_json(path: Path) -> Any:
    """A results file, gzip-compressed when its name ends in .gz (results with every plan's time)."""
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def dist(key: str) -> dict[str, float]:
        return distribution([r[key] for r in rows if r.get(key) is not None])

    cold = [r for r in rows if r["cold"]]
    warm = [r["warm_select_us"] for r in rows if r.get("warm_select_us") is not None]
    return {"problems": len(rows), "efficiency": {k: dist(f"eff_{k}") for k in
                                                  ("space", "essential", "model", "rules", "space_top3",
                                                   "vendor")},
            "cold_picks": len(cold), "picks_from_space": sum(bool(r.get("from_space")) for r in rows),
            "cold_select_s": {"median": statistics.median([r["select_s"] for r in cold]) if cold else None,
                              "max": max((r["select_s"] for r in cold), default=None)},
            "warm_select_us_median": statistics.median(warm) if warm else None}


def zoo_groups(args: argparse.Namespace) -> dict[str, list[Any]]:
    """Per key, the slice [start, start + count) of the zoo's problems (count default: 24 GEMM, 12 conv)."""
    if args.ops == "gemm":
        keys = [(f"gemm_{args.dtype}", None, 0)]
    else:
        keys = [(f"conv_{d}_{args.dtype}_{n}d", d, n) for d in args.directions for n in args.ndims]
    groups = {}
    for key, direction, ndim in keys:
        problems = zoo_problems(args.zoo, args.dtype, args.seed, direction, ndim)
        end = args.start + (args.count or (24 if direction is None else 12))
        chunk = problems[args.start:end]
        stop = args.start + len(chunk)
        print(f"{key}: {len(problems)} zoo problems, slice {args.start}..{stop}", flush=True)
        if chunk:
            groups[f"{key}@zoo{args.start}-{stop}"] = chunk
    return groups


def pooled(data: dict[str, Any]) -> dict[str, Any]:
    """The summary of every key of a results file, the rows of a key's zoo slices pooled."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for key, result in data.get("results", {}).items():
        rows.setdefault(key.split("@zoo")[0], []).extend(result["rows"])
    return {key: summary(key_rows) for key, key_rows in sorted(rows.items())}


def interleaved(groups: dict[str, list[Any]]) -> list[tuple[str, int]]:
    """(key, index) of every problem, the keys interleaved in proportion to their sizes, so that a run cut
    short by its deadline has measured a share of every key."""
    order = [(i / len(problems), key, i) for key, problems in groups.items() for i in range(len(problems))]
    return [(key, i) for _, key, i in sorted(order)]


def save(out: Path | None, rows: dict[str, list[dict[str, Any]]], gpu: str) -> None:
    """Merge the rows measured so far into `out` by key; a zoo slice's key names the problems measured."""
    if out is None:
        return
    data = json.loads(out.read_text()) if out.is_file() else {}
    results = data.setdefault("results", {})
    for key, key_rows in rows.items():
        done = [row for row in key_rows if "best_ms" in row]
        name = key
        if "@zoo" in key:
            base, span = key.split("@zoo")
            first = int(span.split("-")[0])
            for old in [k for k in results if k.startswith(f"{base}@zoo{first}-")]:
                del results[old]
            name = f"{base}@zoo{first}-{first + len(done)}"
        if done:
            results[name] = {"summary": summary(done), "rows": done}
    data["gpu"] = gpu
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out)


def run(groups: dict[str, list[Any]], args: argparse.Namespace, gpu: str) -> None:
    """Cold picks of the first --cold problems of each key, the oracle registries, then every problem
    measured in interleaved order until --deadline-s, saved after each one (an interrupt keeps them)."""
    started = time.perf_counter()
    rows: dict[str, list[dict[str, Any]]] = {}
    oracles = {}
    try:
        for key, problems in groups.items():
            cold = problems[:args.cold] if args.cold is not None else problems
            cold_cache = args.cold_cache or Path(tempfile.mkdtemp(prefix="td-rank-space-cold-"))
            rows[key] = cold_picks(cold, cold_cache, args.workers) if cold else []
            oracles[key] = oracle_registry(problems[0], args.cache, args.workers)
        for key, i in interleaved(groups):
            if args.deadline_s and time.perf_counter() - started > args.deadline_s:
                print(f"deadline of {args.deadline_s} s reached", flush=True)
                break
            row = rows[key][i] if i < len(rows[key]) else None
            measured = measure(groups[key][i], row, *oracles[key], keep_times=args.keep_times)
            if row is None:
                rows[key].append(measured)
            save(args.out, rows, gpu)
    except KeyboardInterrupt:
        print("interrupted: keeping what was measured", flush=True)
    save(args.out, rows, gpu)
    for key, key_rows in rows.items():
        done = [row for row in key_rows if "best_ms" in row]
        if done:
            print(json.dumps({key: summary(done)}, indent=1), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", choices=("gemm", "conv"), default="gemm")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--directions", nargs="+", default=["fwd"])
    parser.add_argument("--ndims", nargs="+", type=int, default=[2])
    parser.add_argument("--count", type=int, default=None, help="problems per key (default 24 GEMM, 12 conv)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "td-rank-space-oracle",
                        help="build cache of the oracle's full space (kept between calls)")
    parser.add_argument("-j", "--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--zoo", type=Path, default=None, help="problems from this unseen-zoo file")
    parser.add_argument("--start", type=int, default=0, help="with --zoo: the first problem of the slice")
    parser.add_argument("--cold", type=int, default=None,
                        help="cold picks (step 1) for the first N problems of a key only (default: all); the "
                             "rest take the model's top over the built space")
    parser.add_argument("--cold-cache", type=Path, default=None,
                        help="build cache of the cold picks (default: a fresh one per key)")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="start no new problem after this many seconds; what was measured is kept")
    parser.add_argument("--keep-times", action="store_true",
                        help="keep every plan's time in the rows (rank them with another model offline)")
    parser.add_argument("--summarize", type=Path, default=None,
                        help="print the pooled summary per key of this --out file and exit")
    args = parser.parse_args()
    if args.summarize is not None:
        print(json.dumps(pooled(read_json(args.summarize)), indent=1))
        return
    os.environ["TILEDISPATCH_RANK_SPACE"] = "1"
    os.environ["TILEDISPATCH_MEASURE"] = "0"
    import torch

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    if args.zoo is not None:
        groups = zoo_groups(args)
    elif args.ops == "gemm":
        groups = {f"gemm_{args.dtype}": gemm_problems(args.dtype, args.count or 24, args.seed)}
    else:
        groups = {f"conv_{d}_{args.dtype}_{n}d": conv_problems(d, n, args.dtype, args.count or 12, args.seed)
                  for d in args.directions for n in args.ndims}
    run(groups, args, torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
