"""Convolution benchmark: tiledispatch vs cuDNN, in one run, on suites from public model definitions.

Suites (src/tiledispatch/problems/conv_suites.py): ResNet-50 (dense2d), ResNeXt-50 32x4d (grouped), MobileNetV2
(depthwise), video3d (X3D-M, ResNeXt-101 3D, R3D-18: dense3d, grouped3d, depthwise3d); every direction (fwd,
bwd_data, bwd_weight). Per (direction, dtype, ndim) two registries: preset `conv_{direction}_{dtype}_{ndim}d_all`
for `tune` (every plan validated against an fp32 GPU reference, then timed with a short protocol; the
finalists are re-timed with the full protocol, the fastest wins) and `..._essential` for `auto`
(`select(problem, "auto")` without a tuning DB, timed with the full protocol). cuDNN: channels-last tensors,
cudnn.benchmark=True, F.conv{1,2,3}d / aten.convolution_backward, full protocol. Memory floor: min_bytes over
the device-to-device copy bandwidth measured in the same run. The suites of issue 38's named categories
(conv_suites.HARD_SUITES; --named-categories keeps only dense_3d, depthwise_7x7, small_group_3d or
odd_size_dense cases) add a per-direction geomean vs cuDNN per named category (`named_summary`).

Usage (GPU):  python benchmarks/conv.py [--suites ...] [--directions fwd,bwd_data,bwd_weight] [--categories ...]
                  [--named-categories ...]
                  [--dtype bf16] [--batch-scale 1] [--max-problems N] [--top-k K] [--out PATH] [--smoke]
Usage (CPU):  python benchmarks/conv.py --cpu   (control-flow check: Triton interpreter, shrunk problems, torch
                  CPU conv as the vendor, wall-clock times)
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:   # benchmarks/protocol.py, however this was started
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from conv_summary import (  # noqa: F401 - target, memory_checks and merge_results are the script's API too
    DIRECTIONS,
    FLOOR_TARGET_PCT,
    TARGETS,
    memory_checks,
    merge_results,
    print_acceptance,
    summarize,
    target,
)
from protocol import CpuTimer, CudaTimer, Protocol, Timing, environment, gpu_slug, hbm_copy_gbps

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}    # relative Frobenius error vs the fp32 GPU reference (tf32 off)
MEMORY_BOUND_MAX_CPG = 16        # grouped convs with at most this many channels per group are memory-bound
CANDIDATE_PROTOCOL = Protocol(warmup_ms=0.5, min_samples=5, min_total_ms=2.0, max_samples=30, screen_ratio=1.25,
                              screen_samples=2)


def memory_bound(case: Any) -> bool:
    return case.category.startswith("depthwise") or (case.category.startswith("grouped")
                                                     and case.problem.c_per_group <= MEMORY_BOUND_MAX_CPG)


# -- context and registries -------------------------------------------------------------------------------
@dataclasses.dataclass
class Context:
    device: Any
    timer: CudaTimer | CpuTimer            # full protocol: finalists, auto, cuDNN
    quick: CudaTimer | CpuTimer            # candidate protocol
    protocol: Protocol
    arch: Any
    tuning_db: str
    copy_gbps: float | None = None
    top_k: int | None = None
    finalists: int = 3
    full_matrix: bool = False
    seed: int = 1
    registries: dict = dataclasses.field(default_factory=dict)
    builds: dict = dataclasses.field(default_factory=dict)


def preset_name(direction: str, dtype: str, ndim: int, kind: str) -> str:
    return f"conv_{direction}_{dtype}_{ndim}d_{kind}"


def load_registry(ctx: Context, name: str) -> tuple[Any, dict[str, Any]]:
    """The built registry of a preset (None when the preset cannot be loaded) and its build report."""
    import tiledispatch as td

    reg = td.Registry(ctx.arch, tuning_db=ctx.tuning_db)
    try:
        reg.add_preset(name)
    except td.TileDispatchError as exc:
        return None, {"preset": name, "error": f"{type(exc).__name__}: {exc}"[:400]}
    start = time.perf_counter()
    try:
        report = reg.build()
    except Exception as exc:  # noqa: BLE001 - a broken build skips the group, the run goes on
        return None, {"preset": name, "error": f"build failed: {type(exc).__name__}: {exc}"[:400]}
    return reg, {"preset": name, "kernels": len(reg), "built": len(report.built), "cached": len(report.cached),
                 "failed": report.failed, "skipped": dict(reg.skipped), "seconds": round(time.perf_counter() - start, 2)}


def registry(ctx: Context, direction: str, dtype: str, ndim: int, kind: str) -> Any:
    """The cached registry of a group (None, said once, when its preset is missing)."""
    name = preset_name(direction, dtype, ndim, kind)
    if name not in ctx.registries:
        ctx.registries[name], ctx.builds[name] = load_registry(ctx, name)
        info = ctx.builds[name]
        if ctx.registries[name] is None:
            print(f"preset {name}: {info['error']} -> group skipped", flush=True)
        else:
            print(f"preset {name}: {info['kernels']} kernels, {info['built']} built, {info['cached']} cached, "
                  f"{len(info['failed'])} failed, {len(info['skipped'])} skipped ({info['seconds']} s)", flush=True)
    return ctx.registries[name]


# -- tensors, reference, cuDNN ------------------------------------------------------------------------------
def torch_padding(problem: Any) -> list[int]:
    if any(left != right for left, right in problem.padding):
        raise ValueError(f"asymmetric padding {problem.padding}: torch takes one int per dim")
    return [left for left, _ in problem.padding]


def make_args(problem: Any, device: Any, seed: int) -> Any:
    """Random inputs and the written tensor pre-allocated channels-last (reused by every timed call)."""
    from tiledispatch.dtypes import torch_dtype
    from tiledispatch.kernels.conv_common import OUTPUT_ROLE
    from tiledispatch.runtime.conv_args import empty_channels_last, shapes
    from tiledispatch.testing.reference import make_conv_args

    args = make_conv_args(problem, device, seed=seed)
    role = OUTPUT_ROLE[problem.direction]
    setattr(args, role, empty_channels_last(shapes(problem)[role], torch_dtype(problem.out_dtype), device))
    return args


def torch_call(problem: Any, x: Any, w: Any, dy: Any) -> Callable[[], Any]:
    """The torch op of the direction on these tensors (the written one only gives its shape)."""
    import torch
    import torch.nn.functional as F

    stride, dilation, groups = list(problem.stride), list(problem.dilation), problem.groups
    padding = torch_padding(problem)
    if problem.direction == "fwd":
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
        return lambda: conv(x, w, None, stride, padding, dilation, groups)
    mask = [True, False, False] if problem.direction == "bwd_data" else [False, True, False]
    pick = 0 if problem.direction == "bwd_data" else 1
    back = torch.ops.aten.convolution_backward
    zeros = [0] * problem.ndim
    return lambda: back(dy, x, w, None, stride, padding, dilation, False, zeros, groups, mask)[pick]


def reference(problem: Any, args: Any) -> Any:
    """The direction in float32 on the device, tf32 off, cudnn.benchmark off (no autotuning for it)."""
    import torch

    f32 = lambda t: t.float()
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        return torch_call(problem, f32(args.x), f32(args.w), f32(args.y))()


def rel_err(out: Any, ref: Any) -> float:
    err = float((out.float() - ref).norm() / ref.norm())
    return err if math.isfinite(err) else math.inf


# -- one row ------------------------------------------------------------------------------------------------
def metrics(ctx: Context, prefix: str, timing: Timing | None, problem: Any, cudnn_ms: float | None) -> dict:
    if timing is None:
        return {f"{prefix}_ms": None}
    ms = timing.ms
    out = {f"{prefix}_ms": ms, f"{prefix}_p20_ms": timing.p20_ms, f"{prefix}_p80_ms": timing.p80_ms,
           f"{prefix}_tflops": problem.flops / ms / 1e9, f"{prefix}_gbps": problem.min_bytes / ms / 1e6}
    if ctx.copy_gbps:
        out[f"{prefix}_floor_pct"] = 100.0 * out[f"{prefix}_gbps"] / ctx.copy_gbps
    if prefix != "cudnn" and cudnn_ms:
        out[f"{prefix}_ratio"] = cudnn_ms / ms
    return out


def check_plan(kernel: Any, problem: Any, args: Any, ref: Any, tol: float) -> tuple[Callable[[], Any] | None, Any]:
    """(runner, None) when the kernel's poisoned output matches the reference, else (None, error or message)."""
    from tiledispatch.kernels.conv_common import OUTPUT_ROLE

    out = getattr(args, OUTPUT_ROLE[problem.direction])
    try:
        out.fill_(float("nan"))
        err = rel_err(kernel.launch(args, problem), ref)
    except Exception as exc:  # noqa: BLE001 - a failing kernel or call is a result, recorded; the run goes on
        fatal_check(exc)
        return None, f"{type(exc).__name__}: {exc}"[:300]
    if err > tol:
        return None, err if math.isfinite(err) else "non-finite output (unwritten elements or overflow)"
    return (lambda: kernel.launch(args, problem)), None


STICKY_FAULTS = ("illegal memory access", "misaligned address", "illegal instruction", "unspecified launch failure",
                 "device-side assert", "hardware stack error", "an illegal address")


def fatal_check(exc: BaseException) -> None:
    """A CUDA fault poisons the context: every later call would fail, so stop the run (results so far kept)."""
    text = str(exc).lower()
    if any(fault in text for fault in STICKY_FAULTS):
        raise RuntimeError(f"CUDA context lost ({type(exc).__name__}: {text[:200]}); stopping the run") from exc


def tune(ctx: Context, reg: Any, problem: Any, args: Any, ref: Any, tol: float) -> dict[str, Any]:
    """Validate, then time, every plan (or the rules' top-k); re-time the finalists with the full protocol."""
    from tiledispatch.select.selector import by_rules

    plans = reg.plans(problem)
    try:
        plans = [plan for plan, _ in by_rules(plans, problem, reg.arch)]
        rules_error = None
    except Exception as exc:  # noqa: BLE001 - without a ranking every plan is still timed, in registry order
        rules_error = f"{type(exc).__name__}: {exc}"[:300]
    chosen = plans if ctx.top_k is None else plans[: ctx.top_k]
    quick: dict[str, Timing] = {}
    runners: dict[str, Callable[[], Any]] = {}
    wrong: dict[str, Any] = {}
    best = math.inf
    for plan in chosen:
        runner, problem_msg = check_plan(plan.kernel, plan.problem, args, ref, tol)
        if runner is None:
            wrong[plan.label] = problem_msg
            continue
        try:
            quick[plan.label] = ctx.quick.time_ms(runner, best if math.isfinite(best) else None)
        except Exception as exc:  # noqa: BLE001 - a failing kernel or call is a result, recorded; the run goes on
            fatal_check(exc)
            wrong[plan.label] = f"timing failed: {type(exc).__name__}: {exc}"[:300]
            continue
        runners[plan.label] = runner
        best = min(best, quick[plan.label].ms)
    finals = sorted(quick, key=lambda label: quick[label].ms)[: max(1, ctx.finalists)]
    full = {label: ctx.timer.time_ms(runners[label]) for label in finals}
    winner = min(full, key=lambda label: full[label].ms) if full else None
    result = {"plans": len(plans), "tried": len(chosen), "timed": len(quick),
              "screened": sum(t.screened for t in quick.values()), "wrong": wrong, "winner": winner,
              "winner_timing": full.get(winner) if winner else None, "full": full,
              "rules_first": plans[0].label if plans and rules_error is None else None}
    if rules_error:
        result["rules_error"] = rules_error
    if ctx.full_matrix:
        result["quick"] = {label: t.to_dict() for label, t in quick.items()}
    return result


def auto_pick(ctx: Context, reg: Any, problem: Any, args: Any, ref: Any, tol: float,
              known: dict[str, Timing]) -> dict[str, Any]:
    """The essential registry's `auto` pick, validated and timed (a finalist's full timing is reused)."""
    selection = reg.select(problem, "auto")
    label = selection.kernel.name
    info: dict[str, Any] = {"auto_kernel": label, "auto_strategy": selection.strategy}
    if label in known:
        info["timing"] = known[label]
        return info
    runner, problem_msg = check_plan(selection.kernel, selection.problem, args, ref, tol)
    if runner is None:
        info["auto_wrong"] = problem_msg
        return info
    info["timing"] = ctx.timer.time_ms(runner)
    return info


def copy_timing(timer: CudaTimer | CpuTimer, device: Any, min_bytes: int) -> Timing | None:
    """A device copy moving the row's minimal bytes (half read, half written), timed like the kernels: what a
    kernel that only streams its tensors once would take at this size under this protocol (launch, the flush's
    dirty lines written back, ramp-up and tail included). None on the CPU."""
    import torch

    if device.type != "cuda":
        return None
    src = torch.randn(max(1, min_bytes // 4), dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    return timer.time_ms(lambda: dst.copy_(src))


def copy_metrics(ctx: Context, copy: Timing | None, cudnn_ms: float, min_bytes: int) -> dict[str, Any]:
    """copy_ms; ceiling_ratio = cuDNN time / copy time, the ratio a kernel running at copy speed would get (no
    kernel that reads its inputs and writes its output once from HBM can beat it by much); copy_floor_pct = the
    copy's own bandwidth on min_bytes over the HBM copy bandwidth (what % floor a copy reaches at this size)."""
    if copy is None:
        return {"copy_ms": None}
    out = {"copy_ms": copy.ms, "ceiling_ratio": cudnn_ms / copy.ms}
    if ctx.copy_gbps:
        out["copy_floor_pct"] = 100.0 * min_bytes / copy.ms / 1e6 / ctx.copy_gbps
    return out


def describe_case(case: Any, problem: Any) -> dict[str, Any]:
    from tiledispatch.problems.conv_suites import named_category

    return {"case": case.name, "model": case.model, "layer": case.layer, "category": case.category,
            "named_category": named_category(case.problem), "memory_bound": memory_bound(case), "n": problem.n, "c": problem.c, "k": problem.k,
            "groups": problem.groups, "spatial": list(problem.spatial), "filter": list(problem.filter),
            "stride": list(problem.stride), "padding": [left for left, _ in problem.padding],
            "dilation": list(problem.dilation), "output": list(problem.output), "dtype": problem.dtype,
            "align": problem.align, "flops": problem.flops, "min_bytes": problem.min_bytes}


def run_row(ctx: Context, case: Any, direction: str) -> dict[str, Any]:
    """One (direction, problem): cuDNN, tune over the `_all` preset, auto of the `_essential` preset."""
    from tiledispatch.registry.kernel import prepare

    problem = case.for_direction(direction)
    row: dict[str, Any] = {"direction": direction, **describe_case(case, problem)}
    tol = TOLERANCE[problem.dtype]
    try:
        torch_padding(problem)
        args = make_args(problem, ctx.device, ctx.seed)
        problem = prepare(problem, args)
        ref = reference(problem, args)
        vendor = torch_call(problem, args.x, args.w, args.y)
        row["cudnn_rel_err"] = rel_err(vendor(), ref)
        row["cudnn_valid"] = row["cudnn_rel_err"] <= tol     # reported, never a reason to skip the row
        cudnn = ctx.timer.time_ms(vendor)
        copy = copy_timing(ctx.timer, ctx.device, problem.min_bytes)
    except Exception as exc:  # noqa: BLE001 - a failing kernel or call is a result, recorded; the run goes on
        fatal_check(exc)
        row["error"] = f"setup/cuDNN: {type(exc).__name__}: {exc}"[:400]
        return row
    row.update(metrics(ctx, "cudnn", cudnn, problem, None))
    row.update(copy_metrics(ctx, copy, cudnn.ms, problem.min_bytes))
    groups = {kind: registry(ctx, direction, problem.dtype, problem.ndim, kind) for kind in ("all", "essential")}
    if groups["all"] is None:
        row["error"] = f"preset {preset_name(direction, problem.dtype, problem.ndim, 'all')} missing"
    else:
        result = run_stage(row, "tune", lambda: tune(ctx, groups["all"], problem, args, ref, tol))
        if result:
            row.update({k: v for k, v in result.items() if k not in ("winner_timing", "full", "winner")})
            row["tune_kernel"] = result["winner"]
            row["finalists"] = {label: t.to_dict() for label, t in result["full"].items()}
            row.update(metrics(ctx, "tune", result["winner_timing"], problem, cudnn.ms))
    if groups["essential"] is not None:
        known = {label: Timing(**d) for label, d in row.get("finalists", {}).items()}
        info = run_stage(row, "auto", lambda: auto_pick(ctx, groups["essential"], problem, args, ref, tol, known))
        if info:
            timing = info.pop("timing", None)
            row.update(info)
            row.update(metrics(ctx, "auto", timing, problem, cudnn.ms))
    return row


def run_stage(row: dict[str, Any], stage: str, fn: Callable[[], dict]) -> dict | None:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a failing kernel or call is a result, recorded; the run goes on
        fatal_check(exc)
        row[f"{stage}_error"] = f"{type(exc).__name__}: {exc}"[:400]
        return None


# -- the run ------------------------------------------------------------------------------------------------
def pick(cases: list, n: int | None) -> list:
    """n cases spread evenly over the list (all when n is None)."""
    if n is None or n >= len(cases):
        return cases
    if n <= 1:
        return cases[:1]
    return [cases[round(i * (len(cases) - 1) / (n - 1))] for i in range(n)]


def shrink(case: Any) -> Any:
    """A tiny problem of the same category for the CPU interpreter check (N 1, 8 channels, spatial <= 6)."""
    p = case.problem
    g = {"depthwise": 8, "grouped": 2}.get(case.category.removesuffix("3d"), 1)
    small = tuple(min(s, 6 if p.ndim == 2 else 4) for s in p.spatial)
    k = 8 if g > 1 else min(p.k, 8)
    return dataclasses.replace(case, problem=dataclasses.replace(p, n=1, c=min(p.c, 8) if g == 1 else 8, k=k,
                                                                 groups=g, spatial=small))


def select_cases(opts: argparse.Namespace) -> list:
    from tiledispatch.problems import conv_suites as cs

    cases = []
    for name in opts.suites.split(","):   # --batch-scale scales each suite's batch (conv_suites.MODEL_BATCH)
        cases += [dataclasses.replace(c, problem=dataclasses.replace(
                      c.problem, n=max(1, round(c.problem.n * opts.batch_scale))))
                  for c in cs.suite(name, opts.dtype)]
    if opts.named_categories:
        named = opts.named_categories.split(",")
        unknown = [c for c in named if c not in cs.NAMED_CATEGORIES]
        if unknown:
            raise SystemExit(f"unknown named categories {unknown}; legal: {', '.join(cs.NAMED_CATEGORIES)}")
        cases = [c for c in cases if cs.named_category(c.problem) in named]
    by_cat = cs.by_category(cs.dedupe(cases))
    wanted = opts.categories.split(",") if opts.categories else list(by_cat)
    unknown = [c for c in wanted if c not in cs.CATEGORIES]
    if unknown:
        raise SystemExit(f"unknown categories {unknown}; legal: {', '.join(cs.CATEGORIES)}")
    limit = 1 if (opts.smoke or opts.cpu) and opts.max_problems is None else opts.max_problems
    out = [case for cat in wanted for case in pick(by_cat.get(cat, []), limit)]
    return [shrink(c) for c in out] if opts.cpu else out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--suites", default="resnet50,resnext50_32x4d,mobilenet_v2,video3d",
                        help="comma list of resnet50, resnext50_32x4d, mobilenet_v2, video3d and issue 38's "
                             "dense3d_video, depthwise7x7, small_group3d, odd_size2d")
    parser.add_argument("--directions", default=",".join(DIRECTIONS), help="comma list of fwd, bwd_data, bwd_weight")
    parser.add_argument("--categories", help="comma list of dense2d, grouped, depthwise, dense3d, grouped3d, "
                                             "depthwise3d (default: all)")
    parser.add_argument("--named-categories", help="keep only cases of these named categories: comma list of "
                                                   "dense_3d, depthwise_7x7, small_group_3d, odd_size_dense")
    parser.add_argument("--dtype", default="bf16", choices=sorted(TOLERANCE))
    parser.add_argument("--batch-scale", type=float, default=1.0, help="multiply the default batch (2D 32, 3D 8)")
    parser.add_argument("--max-problems", type=int, help="at most N problems per category (spread over the suite)")
    parser.add_argument("--top-k", type=int, help="time only the top-k plans of the rules ranking (default: all)")
    parser.add_argument("--finalists", type=int, default=3, help="candidates re-timed with the full protocol")
    parser.add_argument("--full-matrix", action="store_true", help="store every candidate's timing")
    parser.add_argument("--tuning-db", help="tuning DB for `auto` (default: a private empty one)")
    parser.add_argument("--out", help="JSON path (default benchmarks/results/conv_<gpu-slug>.json)")
    parser.add_argument("--no-markdown", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="quick GPU run: 1 problem per category")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="write one result (--out) from runs over disjoint rows (a run split over calls), no GPU")
    parser.add_argument("--replace", metavar="WHY",
                        help="with --merge: later runs' rows replace the same rows of earlier ones (recorded with WHY)")
    parser.add_argument("--cpu", action="store_true",
                        help="CPU control-flow check: interpreter, shrunk problems, torch CPU conv as the vendor")
    opts = parser.parse_args(argv)
    bad = [d for d in opts.directions.split(",") if d not in DIRECTIONS]
    if bad:
        parser.error(f"unknown directions {bad}; legal: {', '.join(DIRECTIONS)}")
    return opts


def make_context(opts: argparse.Namespace, tuning_db: str) -> Context:
    import torch

    import tiledispatch as td

    if opts.cpu:
        timer = CpuTimer()
        return Context(torch.device("cpu"), timer, timer, Protocol(), td.detect(), tuning_db, None, opts.top_k,
                       opts.finalists, opts.full_matrix, opts.seed)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible: run on a GPU machine, or use --cpu for the interpreter check")
    device = torch.device("cuda", torch.cuda.current_device())
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    protocol = Protocol()
    timer = CudaTimer(protocol, device)
    copy_gbps = hbm_copy_gbps(timer)              # also allocates the L2 flush buffer both timers share
    return Context(device, timer, timer.with_protocol(CANDIDATE_PROTOCOL), protocol, td.detect(), tuning_db,
                   copy_gbps, opts.top_k, opts.finalists, opts.full_matrix, opts.seed)


def header(ctx: Context, opts: argparse.Namespace) -> dict[str, Any]:
    cuda = ctx.device.type == "cuda"
    return {"benchmark": "conv", "mode": "cpu" if opts.cpu else ("smoke" if opts.smoke else "gpu"),
            **environment(ctx.device), "arch": ctx.arch.name,
            "protocol": ctx.protocol.describe(cuda, vendor="cudnn") + (
                f"; candidates of `tune`: {CANDIDATE_PROTOCOL.brief()}, the {ctx.finalists} fastest re-timed with "
                "the full protocol" if cuda else ""),
            "vendor": "cuDNN via torch (channels-last, cudnn.benchmark=True)" if cuda else "torch CPU conv",
            "limits": {"hbm_copy_gbps": ctx.copy_gbps}, "dtype": opts.dtype, "suites": opts.suites.split(","),
            "batch_scale": opts.batch_scale, "top_k": opts.top_k, "tolerances": TOLERANCE,
            "targets": TARGETS, "floor_target_pct": FLOOR_TARGET_PCT, "argv": sys.argv[1:]}


def default_out(result: dict[str, Any]) -> Path:
    if result["mode"] != "gpu":
        return Path(tempfile.gettempdir()) / f"conv_{result['mode']}.json"
    return ROOT / "benchmarks" / "results" / f"conv_{gpu_slug(result['gpu'])}.json"


def write_result(result: dict[str, Any], rows: list, builds: dict, out: Path, start: float) -> None:
    import json

    result.update(seconds=round(time.perf_counter() - start, 1), builds=builds, summary=summarize(rows),
                  named_summary=named_summary(rows), rows=rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))


def update_markdown(json_path: Path, md_path: Path = ROOT / "BENCHMARKS.md",
                    results: Path = ROOT / "benchmarks" / "results") -> None:
    """Render the table block of this result in BENCHMARKS.md again (tables.py), or append one."""
    import tables

    try:
        source = json_path.resolve().relative_to(results.resolve()).as_posix()
    except ValueError:
        print(f"{json_path} is not under {results}: BENCHMARKS.md left as it is")
        return
    text = md_path.read_text() if md_path.exists() else "# Benchmarks\n"
    md_path.write_text(tables.put_block(text, source, results))


def named_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per direction x named category (issue 38: dense_3d, depthwise_7x7, small_group_3d, odd_size_dense), the
    geomean of cuDNN_ms / tune_ms and of auto, the worst case, and whether the geomean reaches 1.0x with every
    row measured. Rows outside the named categories (or from runs before them) are left out."""
    from protocol import geomean

    from tiledispatch.problems.conv_suites import NAMED_CATEGORIES

    out = []
    for direction in DIRECTIONS:
        for named in NAMED_CATEGORIES:
            sub = [r for r in rows if r["direction"] == direction and r.get("named_category") == named]
            if not sub:
                continue
            tuned = [r for r in sub if r.get("tune_ratio")]
            worst = min(tuned, key=lambda r: r["tune_ratio"], default=None)
            value = geomean([r["tune_ratio"] for r in tuned])
            out.append({"direction": direction, "named_category": named, "rows": len(tuned), "of": len(sub),
                        "tune_geomean": value, "auto_geomean": geomean([r.get("auto_ratio") for r in sub]),
                        "tune_min": worst["tune_ratio"] if worst else None,
                        "tune_min_case": worst["case"] if worst else None,
                        "pass": bool(value is not None and value >= 1.0 and len(tuned) == len(sub))})
    return out


def print_named(groups: list[dict[str, Any]]) -> None:
    if not groups:
        return
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    print("\nnamed categories (issue 38: tune over `_all` vs cuDNN, geomean; target 1.00x)")
    for g in groups:
        print(f"  {g['direction']:<10} {g['named_category']:<15} tune {fmt(g['tune_geomean']):>7}  auto "
              f"{fmt(g['auto_geomean']):>7}  worst {fmt(g['tune_min']):>7} {g['tune_min_case'] or ''}  "
              f"{'PASS' if g['pass'] else 'FAIL'}  ({g['rows']}/{g['of']} rows)")


def progress_line(i: int, total: int, row: dict[str, Any], elapsed: float) -> str:
    us = lambda ms: f"{ms * 1e3:9.1f} us" if ms else "        - us"
    ratio = lambda r: f"{r:5.2f}x" if r else "    -"
    floor = f"{row['tune_floor_pct']:5.1f}%" if row.get("tune_floor_pct") else "    -"
    tail = row.get("error") or row.get("tune_error") or row.get("tune_kernel")
    if row.get("cudnn_valid") is False:
        tail = f"(vendor rel err {row['cudnn_rel_err']:.2g} above tolerance) {tail}"
    return (f"[{i:>3}/{total}] {elapsed:6.0f}s {row['direction']:<10} {row['category']:<11} {row['case']:<34} cuDNN "
            f"{us(row.get('cudnn_ms'))} | tune {us(row.get('tune_ms'))} {ratio(row.get('tune_ratio'))} {floor} | "
            f"auto {us(row.get('auto_ms'))} {ratio(row.get('auto_ratio'))} | {row.get('timed', 0)}/"
            f"{row.get('plans', 0)} timed, {len(row.get('wrong', {}))} wrong | {tail}")


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.merge:
        import json

        if not opts.out:
            raise SystemExit("--merge needs --out")
        merged = merge_results([Path(p) for p in opts.merge], opts.replace)
        merged["named_summary"] = named_summary(merged["rows"])
        Path(opts.out).write_text(json.dumps(merged, indent=1, default=str))
        if not opts.no_markdown:
            update_markdown(Path(opts.out))
        print(f"wrote {opts.out}")
        return 0
    cases = select_cases(opts)
    directions = opts.directions.split(",")
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ctx = make_context(opts, opts.tuning_db or str(Path(tmp) / "tuning.json"))
        result = header(ctx, opts)
        out = Path(opts.out) if opts.out else default_out(result)
        total = len(directions) * len(cases)
        print(f"{len(cases)} problems x {len(directions)} directions on {result['gpu']}; HBM copy "
              f"{ctx.copy_gbps or 0:.0f} GB/s", flush=True)
        try:
            for direction in directions:
                for case in cases:
                    rows.append(run_row(ctx, case, direction))
                    print(progress_line(len(rows), total, rows[-1], time.perf_counter() - start), flush=True)
                write_result(result, rows, ctx.builds, out, start)
        finally:
            write_result(result, rows, ctx.builds, out, start)
    print_acceptance(result["summary"])
    print_named(result["named_summary"])
    if result["mode"] == "gpu" and not opts.no_markdown:
        update_markdown(out)
        print("updated BENCHMARKS.md (conv section)")
    print(f"wrote {out} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
