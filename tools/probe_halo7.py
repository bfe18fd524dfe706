"""Issue 38's 7x7 depthwise fwd, bwd_data and bwd_weight layers: the halo kernels (kernels/conv_halo.py, kloop
'halo', block_k 7: the filter window slid along W in registers) next to the bf16 2-D `_all` preset of the
direction (and, with --with-roll7, the roll7 instances of tools/probe_roll7.py), against cuDNN under
benchmarks/conv.py's protocol, before they enter any preset (docs/design/conv_direct.md).

    python tools/probe_halo7.py [--directions fwd,bwd_data,bwd_weight] [--max-problems N] [--top-k K]
        [--only-halo] [--with-roll7] [--out PATH (default results/probe_halo7.json)] [--cpu]

Per direction and layer of the depthwise7x7 suite: benchmarks/conv.py's row (cuDNN; `tune` over the registry
with every candidate's timing; `auto` of `_essential`), then the fastest HALO7 instance, the fastest roll7
one (with --with-roll7) and the fastest other one side by side (candidate protocol) with their ratios to cuDNN
(> 1: faster than cuDNN). --only-halo leaves `_all` out (a quick look; with --cpu, the interpreter check of
the tool itself).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tools"))
import conv as bench  # benchmarks/conv.py: cases, context, rows and their protocol  # noqa: E402
import probe_roll7  # noqa: E402  tools/probe_roll7.py: the roll7 instances, geomean, bench options

# (block_m, block_n, num_warps): block_m output rows x 8 output columns x block_n channels per program; 2
# channels per thread (the design's bf16 pair) on the first five, 4 on the last four
HALO7_TILES = ((4, 64, 4), (2, 64, 2), (8, 32, 4), (8, 64, 8), (1, 64, 1),
               (8, 64, 4), (4, 64, 2), (4, 128, 4), (16, 32, 4))
HALO7_STAGES = (1, 2)
HALO7_DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")   # the directions kloop 'halo' computes


def halo7_configs(arch: Any, dtype: str = "bf16", direction: str = "fwd") -> list[Any]:
    """The valid 2-D 7x7 halo instances of `direction`."""
    from tiledispatch.configs.conv import ConvConfig
    from tiledispatch.kernels.family import is_valid_config

    out = [ConvConfig(family="direct", kloop="halo", direction=direction, ndim=2, dtype=dtype, block_m=bm,
                      block_n=bn, block_k=7, num_warps=warps, num_stages=stages, align=8)
           for bm, bn, warps in HALO7_TILES for stages in HALO7_STAGES]
    return [cfg for cfg in out if is_valid_config(cfg, arch)]


def install_registry(ctx: Any, direction: str, dtype: str, with_all: bool,
                     with_roll7: bool) -> dict[str, set[str]]:
    """Put the registry `_all` (+ HALO7, + roll7) where benchmarks/conv.py's run_row looks for the `_all`
    preset of (direction, dtype, 2-D); returns the added names per set."""
    import tiledispatch as td

    name = bench.preset_name(direction, dtype, 2, "all")
    reg = td.Registry(ctx.arch, tuning_db=ctx.tuning_db)
    if with_all:
        reg.add_preset(name)
    sets = {"halo7": halo7_configs(ctx.arch, dtype, direction)}
    if with_roll7:
        sets["roll7"] = probe_roll7.roll7_configs(direction, ctx.arch, dtype)
    for configs in sets.values():
        for cfg in configs:
            reg.add(cfg)
    start = time.perf_counter()
    report = reg.build()
    ctx.registries[name] = reg
    added = {k: [c.name for c in v] for k, v in sets.items()}
    ctx.builds[name] = {"preset": name if with_all else None, **added, "kernels": len(reg),
                        "failed": report.failed, "seconds": round(time.perf_counter() - start, 2)}
    print(f"{name}{' + ' if with_all else ': only '}"
          + ", ".join(f"{len(v)} {k}" for k, v in sets.items())
          + f" instances: {len(reg)} kernels, {len(report.failed)} failed", flush=True)
    return {k: {c.name for c in v} for k, v in sets.items()}


def side_by_side(row: dict[str, Any], sets: dict[str, set[str]]) -> dict[str, Any]:
    """The fastest candidate of each added set and the fastest other one (candidate protocol), vs cuDNN."""
    quick = {label: t["ms"] for label, t in row.get("quick", {}).items()}
    cudnn = row.get("cudnn_ms")
    added = set().union(*sets.values())
    split = {**{k: [x for x in quick if x in v] for k, v in sets.items()},
             "others": [x for x in quick if x not in added]}
    out: dict[str, Any] = {}
    for key, labels in split.items():
        if labels:
            best = min(labels, key=quick.__getitem__)
            out[f"{key}_kernel"], out[f"{key}_ms"] = best, quick[best]
            out[f"{key}_vs_cudnn"] = cudnn / quick[best] if cudnn else None
    out["winner_is_halo7"] = row.get("tune_kernel") in sets["halo7"]
    return out


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--directions", default=",".join(HALO7_DIRECTIONS),
                    help=f"comma list of {', '.join(HALO7_DIRECTIONS)} (default: all)")
    ap.add_argument("--max-problems", type=int, help="at most N layers (spread over the suite)")
    ap.add_argument("--top-k", type=int, help="time only the rules' top-k plans (default: all)")
    ap.add_argument("--only-halo", action="store_true", help="leave the `_all` preset out")
    ap.add_argument("--with-roll7", action="store_true", help="add tools/probe_roll7.py's fwd instances")
    ap.add_argument("--out", default=str(ROOT / "results" / "probe_halo7.json"))
    ap.add_argument("--cpu", action="store_true", help="interpreter control-flow check (shrunk problems)")
    opts = ap.parse_args(argv)
    bad = [d for d in opts.directions.split(",") if d not in HALO7_DIRECTIONS]
    if bad:
        ap.error(f"--directions: kloop 'halo' computes {', '.join(HALO7_DIRECTIONS)}; got {bad}")
    return opts, probe_roll7.bench_options(opts)


def summarize(rows: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    """Geomeans over the rows of one direction: each set's ratio to cuDNN and tune's."""
    summary = {f"{key}_vs_cudnn": probe_roll7.geomean([r[f"{key}_vs_cudnn"] for r in rows
                                                        if r.get(f"{key}_vs_cudnn")])
               for key in keys}
    summary["tune_ratio"] = probe_roll7.geomean([r["tune_ratio"] for r in rows if r.get("tune_ratio")])
    return summary


def run_direction(ctx: Any, opts: argparse.Namespace, bopts: argparse.Namespace, direction: str,
                  cases: list[Any], start: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of one direction (its registry first) and their summary."""
    sets = install_registry(ctx, direction, bopts.dtype, not opts.only_halo, opts.with_roll7)
    keys = [*sets, "others"]
    rows: list[dict[str, Any]] = []
    for case in cases:
        row = bench.run_row(ctx, case, direction)
        row.update(side_by_side(row, sets))
        rows.append(row)
        print(bench.progress_line(len(rows), len(cases), row, time.perf_counter() - start), flush=True)
        print("      " + " | ".join(f"{key} {row.get(f'{key}_vs_cudnn') or 0:5.2f}x "
                                   f"{row.get(f'{key}_kernel')}" for key in keys), flush=True)
    return rows, summarize(rows, keys)


def main(argv: list[str] | None = None) -> int:
    import tempfile

    opts, bopts = parse_args(argv)
    cases = bench.select_cases(bopts)
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ctx = bench.make_context(bopts, str(Path(tmp) / "tuning.json"))
        result = {**bench.header(ctx, bopts), "probe": "halo7", "only_halo": opts.only_halo}
        start = time.perf_counter()
        for direction in opts.directions.split(","):
            done, summary[direction] = run_direction(ctx, opts, bopts, direction, cases, start)
            rows += done
        result.update(seconds=round(time.perf_counter() - start, 1), builds=ctx.builds, summary=summary,
                      rows=rows)
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    for direction, numbers in summary.items():
        print(f"{direction}: geomean vs cuDNN: " + ", ".join(f"{k} {v}" for k, v in numbers.items()))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
