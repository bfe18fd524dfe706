"""Issue 38's 7x7 depthwise bwd_weight layers: kloop 'halofh' (kernels/conv_halo_fh.py: the filter rows in
the tile, each dy row loaded once) against the kloop 'halo' bwd_weight instances of tools/probe_halo7.py and
cuDNN, under benchmarks/conv.py's protocol, before any of them enters a preset (docs/design/conv_direct.md).

    python tools/probe_halo_wgrad.py [--out PATH (default results/probe_halo_wgrad.json)] [--max-problems N]
        [--only-new] [--suite depthwise7x7|mobilenet_v2] [--cpu]

Per layer of the depthwise7x7 suite (bwd_weight, bf16): cuDNN (full protocol), then every OLD (HALO7) and NEW
(NEW_TILES) instance validated against the fp32 reference (benchmarks/conv.py's check_plan: a poisoned
output, the relative Frobenius error within its bf16 tolerance) and timed with the candidate protocol; the
fastest of each set is re-timed with the full protocol. Prints a line per layer and the geomeans vs cuDNN
(> 1: faster than cuDNN); the JSON holds every candidate's timing and every rejected one's error. --cpu:
the interpreter check of the tool itself (shrunk layers, CPU_CANDIDATES of each set; CPU times mean nothing).
--suite mobilenet_v2: its 3x3 depthwise layers instead (NEW at block_k 3, FH 4; stride-2 layers have no NEW
plan), with the bwd_weight essential preset (what `auto` ranks by default) as the OLD set.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tools"))
import conv as bench  # benchmarks/conv.py: cases, context, reference, check and timers  # noqa: E402
import probe_halo7  # noqa: E402  tools/probe_halo7.py: the OLD kloop 'halo' instances

# (block_m strip columns, block_n, num_warps, align, split_k programs per SM (0: 8), num_stages); block_k 7
# (FH 8). Values per thread of an [8, block_n] tile: 4 on the first two, 2 on the next two, 8 on the rest
NEW_TILES = (
    (7, 64, 4, 8, 0, 1), (7, 32, 2, 8, 0, 1), (7, 32, 4, 8, 0, 1), (7, 64, 8, 8, 0, 1),
    (7, 64, 2, 4, 0, 1), (7, 32, 1, 8, 0, 1),
    (8, 64, 4, 8, 0, 1), (8, 32, 4, 8, 0, 1), (8, 64, 8, 8, 0, 1), (8, 32, 1, 8, 0, 1),
    (14, 64, 4, 8, 0, 1), (14, 32, 4, 8, 0, 1), (14, 64, 8, 8, 0, 1), (14, 32, 1, 8, 0, 1),
    (16, 32, 4, 8, 0, 1),
    (7, 64, 4, 8, 2, 1), (7, 32, 4, 8, 2, 1), (7, 64, 8, 8, 2, 1), (7, 64, 4, 8, 4, 1),
    (7, 64, 4, 8, 0, 2), (8, 64, 4, 8, 0, 2),
)
CPU_CANDIDATES = 3   # --cpu: the first few of each set
# --suite: (benchmarks/conv.py's suite and case filter, NEW block_k, OLD set: None = probe_halo7's HALO7)
SUITES = {"depthwise7x7": (["--suites", "depthwise7x7", "--named-categories", "depthwise_7x7"], 7, None),
          "mobilenet_v2": (["--suites", "mobilenet_v2", "--categories", "depthwise"], 3,
                           "conv_bwd_weight_bf16_2d_essential")}


def new_configs(arch: Any, dtype: str = "bf16", block_k: int = 7) -> list[Any]:
    """The valid kloop 'halofh' instances of NEW_TILES at window width block_k."""
    from tiledispatch.configs.conv import ConvConfig
    from tiledispatch.kernels.family import is_valid_config

    out = [ConvConfig(family="direct", kloop="halofh", direction="bwd_weight", ndim=2, dtype=dtype,
                      block_m=bm, block_n=bn, block_k=block_k, num_warps=warps, num_stages=stages,
                      align=align, split_k=split)
           for bm, bn, warps, align, split, stages in NEW_TILES]
    return [cfg for cfg in out if is_valid_config(cfg, arch)]


def build_registry(ctx: Any, opts: argparse.Namespace) -> tuple[Any, dict[str, list[str]], dict[str, Any]]:
    """One registry of the OLD and NEW sets (compiled in spawned workers); the names per set; build info."""
    import tiledispatch as td
    from tiledispatch.presets import load_preset

    _, block_k, old_preset = SUITES[opts.suite]
    sets = {"new": new_configs(ctx.arch, "bf16", block_k)}
    if not opts.only_new:
        sets["old"] = (probe_halo7.halo7_configs(ctx.arch, "bf16", "bwd_weight") if old_preset is None
                       else list(load_preset(old_preset)))
    if opts.cpu:
        sets = {k: v[:CPU_CANDIDATES] for k, v in sets.items()}
    reg = td.Registry(ctx.arch)
    for configs in sets.values():
        for cfg in configs:
            reg.add(cfg)
    start = time.perf_counter()
    report = reg.build()
    names = {k: [c.name for c in v] for k, v in sets.items()}
    info = {**names, "kernels": len(reg), "failed": report.failed,
            "seconds": round(time.perf_counter() - start, 1)}
    print(f"built {len(reg)} kernels ({', '.join(f'{len(v)} {k}' for k, v in names.items())}), "
          f"{len(report.failed)} failed, {info['seconds']} s", flush=True)
    return reg, names, info


def time_set(ctx: Any, plans: list[Any], args: Any, ref: Any, tol: float) -> dict[str, Any]:
    """Validate and time (candidate protocol) each plan; re-time the fastest with the full protocol."""
    quick: dict[str, Any] = {}
    runners: dict[str, Any] = {}
    wrong: dict[str, Any] = {}
    best = math.inf
    for plan in plans:
        runner, problem_msg = bench.check_plan(plan.kernel, plan.problem, args, ref, tol)
        if runner is None:
            wrong[plan.label] = problem_msg
            continue
        try:
            quick[plan.label] = ctx.quick.time_ms(runner, best if math.isfinite(best) else None)
        except Exception as exc:  # noqa: BLE001 - a failing kernel is a result, recorded; the run goes on
            bench.fatal_check(exc)
            wrong[plan.label] = f"timing failed: {type(exc).__name__}: {exc}"[:300]
            continue
        runners[plan.label] = runner
        best = min(best, quick[plan.label].ms)
    out: dict[str, Any] = {"quick_ms": {k: t.ms for k, t in quick.items()}, "wrong": wrong}
    if quick:
        winner = min(quick, key=lambda label: quick[label].ms)
        out.update(kernel=winner, ms=ctx.timer.time_ms(runners[winner]).ms)
    return out


def run_layer(ctx: Any, reg: Any, names: dict[str, list[str]], case: Any) -> dict[str, Any]:
    """cuDNN and the fastest valid instance of each set on one layer."""
    from tiledispatch.registry.kernel import prepare

    problem = case.for_direction("bwd_weight")
    row: dict[str, Any] = bench.describe_case(case, problem)
    tol = bench.TOLERANCE[problem.dtype]
    args = bench.make_args(problem, ctx.device, ctx.seed)
    problem = prepare(problem, args)
    ref = bench.reference(problem, args)
    vendor = bench.torch_call(problem, args.x, args.w, args.y)
    row["cudnn_rel_err"] = bench.rel_err(vendor(), ref)
    row["cudnn_ms"] = ctx.timer.time_ms(vendor).ms
    plans = reg.plans(problem)
    for key, members in names.items():
        chosen = [plan for plan in plans if plan.kernel.name in set(members)]
        result = time_set(ctx, chosen, args, ref, tol)
        row[key] = result
        if result.get("ms"):
            row[f"{key}_vs_cudnn"] = row["cudnn_ms"] / result["ms"]
    if row.get("new", {}).get("ms") and row.get("old", {}).get("ms"):
        row["new_vs_old"] = row["old"]["ms"] / row["new"]["ms"]
    return row


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def short(name: str | None) -> str:
    if not name:
        return "-"
    # conv-direct-bwd_weight-2d-bf16-bf16-fp32-<tile>-g1-w<w>-s<s>-k<k>-<kloop>-a<a>-none-b0
    parts = name.split("-")
    return "-".join([parts[7], *parts[9:13], parts[13]])


def print_row(i: int, total: int, row: dict[str, Any]) -> None:
    cells = [f"[{i}/{total}] {row['case'][:40]:40s} cuDNN {row['cudnn_ms'] * 1e3:8.1f} us"]
    for key in ("old", "new"):
        if key in row:
            ms = row[key].get("ms")
            ratio = row.get(f"{key}_vs_cudnn") or 0
            cells.append(f"{key} {ms * 1e3 if ms else math.nan:8.1f} us {ratio:5.2f}x "
                         f"{short(row[key].get('kernel')):28s} ({len(row[key]['wrong'])} wrong)")
    print(" | ".join(cells), flush=True)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-problems", type=int, help="at most N layers (spread over the suite)")
    ap.add_argument("--only-new", action="store_true", help="leave the OLD (HALO7) set out")
    ap.add_argument("--out", default=str(ROOT / "results" / "probe_halo_wgrad.json"))
    ap.add_argument("--suite", choices=sorted(SUITES), default="depthwise7x7")
    ap.add_argument("--cpu", action="store_true", help="interpreter control-flow check (shrunk problems)")
    opts = ap.parse_args(argv)
    argv_bench = [*SUITES[opts.suite][0], "--dtype", "bf16", "--directions", "bwd_weight", "--no-markdown"]
    argv_bench += ["--max-problems", str(opts.max_problems)] if opts.max_problems else []
    argv_bench += ["--cpu"] if opts.cpu else []
    return opts, bench.parse_args(argv_bench)


def main(argv: list[str] | None = None) -> int:
    opts, bopts = parse_args(argv)
    cases = bench.select_cases(bopts)
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = bench.make_context(bopts, str(Path(tmp) / "tuning.json"))
        result = {**bench.header(ctx, bopts), "probe": "halo_wgrad", "suite": opts.suite,
                  "new_tiles": NEW_TILES}
        reg, names, result["build"] = build_registry(ctx, opts)
        for case in cases:
            try:
                rows.append(run_layer(ctx, reg, names, case))
            except Exception as exc:  # noqa: BLE001 - a failing layer is a result, recorded; the run goes on
                bench.fatal_check(exc)
                rows.append({"case": case.name, "error": f"{type(exc).__name__}: {exc}"[:400]})
                print(f"[{len(rows)}/{len(cases)}] {case.name}: {rows[-1]['error']}", flush=True)
                continue
            print_row(len(rows), len(cases), rows[-1])
    summary = {f"{key}_vs_cudnn": geomean([r.get(f"{key}_vs_cudnn") for r in rows]) for key in names}
    summary["new_vs_old"] = geomean([r.get("new_vs_old") for r in rows])
    summary["new_faster_than_cudnn"] = sum((r.get("new_vs_cudnn") or 0) >= 1.0 for r in rows)
    summary["new_winners"] = sorted({r["new"]["kernel"] for r in rows if r.get("new", {}).get("kernel")})
    result.update(seconds=round(time.perf_counter() - start, 1), summary=summary, rows=rows)
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    print("geomean vs cuDNN: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in summary.items() if k != "new_winners"))
    print(f"new winners: {', '.join(short(n) for n in summary['new_winners'])}")
    print(f"wrote {out} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
