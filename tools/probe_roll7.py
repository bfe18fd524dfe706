"""Issue 38's 7x7 depthwise layers: the roll kernels past three filter rows (kernels/conv_roll.py, block_k 7:
seven rolling accumulators) next to the bf16 2-D `_all` presets, against cuDNN under benchmarks/conv.py's
protocol, before they enter any preset (they need GPU sweeps first; docs/design/conv_direct.md).

    python tools/probe_roll7.py [--directions fwd,bwd_data] [--max-problems N] [--top-k K] [--only-roll7]
        [--out PATH (default results/probe_roll7.json)] [--cpu]

Per (direction, layer of the depthwise7x7 suite): benchmarks/conv.py's row (cuDNN; `tune` over `_all` plus
ROLL7 with every candidate's timing; `auto` of `_essential`), then the fastest ROLL7 instance and the fastest
other one side by side (candidate protocol) with their ratios to cuDNN (> 1: faster than cuDNN). bwd_weight
has no ROLL7 instance (its roll keeps three filter rows): it runs `_all` alone. --only-roll7 leaves `_all`
out (a quick look; on the CPU, the interpreter check of the tool itself).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import conv as bench  # benchmarks/conv.py: cases, context, rows and their protocol  # noqa: E402

# (block_m, block_n, num_warps): 8 accumulator values per thread per tile, 7 tiles (56 of the 96 allowed)
ROLL7_TILES = ((32, 32, 4), (16, 64, 4), (64, 32, 8), (8, 128, 4), (32, 64, 8), (16, 32, 2))
ROLL7_STAGES = (1, 2, 3)
ROLL7_DIRECTIONS = ("fwd", "bwd_data")


def roll7_configs(direction: str, arch: Any, dtype: str = "bf16") -> list[Any]:
    """The valid 2-D 7x7 roll instances of `direction` (none for bwd_weight)."""
    from tiledispatch.configs.conv import ConvConfig
    from tiledispatch.kernels.family import is_valid_config

    if direction not in ROLL7_DIRECTIONS:
        return []
    out = [ConvConfig(family="direct", kloop="roll", direction=direction, ndim=2, dtype=dtype, block_m=bm,
                      block_n=bn, block_k=7, num_warps=warps, num_stages=stages, align=8)
           for bm, bn, warps in ROLL7_TILES for stages in ROLL7_STAGES]
    return [cfg for cfg in out if is_valid_config(cfg, arch)]


def install_registry(ctx: Any, direction: str, dtype: str, with_all: bool) -> list[str]:
    """Put the registry `_all` (+ ROLL7) where benchmarks/conv.py's run_row looks for the `_all` preset of
    (direction, dtype, 2-D); returns the ROLL7 names."""
    import tiledispatch as td

    name = bench.preset_name(direction, dtype, 2, "all")
    reg = td.Registry(ctx.arch, tuning_db=ctx.tuning_db)
    if with_all:
        reg.add_preset(name)
    extra = roll7_configs(direction, ctx.arch, dtype)
    for cfg in extra:
        reg.add(cfg)
    start = time.perf_counter()
    report = reg.build()
    ctx.registries[name] = reg
    ctx.builds[name] = {"preset": name if with_all else None, "roll7": [c.name for c in extra],
                        "kernels": len(reg), "failed": report.failed,
                        "seconds": round(time.perf_counter() - start, 2)}
    print(f"{name}{' + ' if with_all else ': only '}{len(extra)} roll7 instances: {len(reg)} kernels, "
          f"{len(report.failed)} failed", flush=True)
    return [c.name for c in extra]


def side_by_side(row: dict[str, Any], roll7: set[str]) -> dict[str, Any]:
    """The fastest ROLL7 candidate and the fastest other one (candidate protocol), vs cuDNN."""
    quick = {label: t["ms"] for label, t in row.get("quick", {}).items()}
    cudnn = row.get("cudnn_ms")
    out: dict[str, Any] = {}
    split = {"roll7": [k for k in quick if k in roll7], "others": [k for k in quick if k not in roll7]}
    for key, labels in split.items():
        if labels:
            best = min(labels, key=quick.__getitem__)
            out[f"{key}_kernel"], out[f"{key}_ms"] = best, quick[best]
            out[f"{key}_vs_cudnn"] = cudnn / quick[best] if cudnn else None
    out["winner_is_roll7"] = row.get("tune_kernel") in roll7
    return out


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--directions", default=",".join(ROLL7_DIRECTIONS))
    ap.add_argument("--max-problems", type=int, help="at most N layers (spread over the suite)")
    ap.add_argument("--top-k", type=int, help="time only the rules' top-k plans (default: all)")
    ap.add_argument("--only-roll7", action="store_true", help="leave the `_all` preset out")
    ap.add_argument("--out", default=str(ROOT / "results" / "probe_roll7.json"))
    ap.add_argument("--cpu", action="store_true", help="interpreter control-flow check (shrunk problems)")
    opts = ap.parse_args(argv)
    return opts, bench_options(opts)


def bench_options(opts: argparse.Namespace) -> argparse.Namespace:
    """benchmarks/conv.py's options for a probe's --directions, --max-problems, --top-k and --cpu: the
    depthwise7x7 suite, bf16, every plan of the registry timed (--full-matrix)."""
    argv_bench = ["--suites", "depthwise7x7", "--named-categories", "depthwise_7x7", "--dtype", "bf16",
                  "--directions", opts.directions, "--full-matrix", "--no-markdown"]
    argv_bench += ["--max-problems", str(opts.max_problems)] if opts.max_problems else []
    argv_bench += ["--top-k", str(opts.top_k)] if opts.top_k else []
    argv_bench += ["--cpu"] if opts.cpu else []
    return bench.parse_args(argv_bench)


def main(argv: list[str] | None = None) -> int:
    import tempfile

    opts, bopts = parse_args(argv)
    cases = bench.select_cases(bopts)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ctx = bench.make_context(bopts, str(Path(tmp) / "tuning.json"))
        result = {**bench.header(ctx, bopts), "probe": "roll7", "only_roll7": opts.only_roll7}
        start = time.perf_counter()
        for direction in bopts.directions.split(","):
            roll7 = set(install_registry(ctx, direction, bopts.dtype, not opts.only_roll7))
            for case in cases:
                row = bench.run_row(ctx, case, direction)
                row.update(side_by_side(row, roll7))
                rows.append(row)
                total = len(cases) * len(bopts.directions.split(","))
                print(bench.progress_line(len(rows), total, row, time.perf_counter() - start), flush=True)
                print("      " + " | ".join(f"{key} {row.get(f'{key}_vs_cudnn') or 0:5.2f}x "
                                               f"{row.get(f'{key}_kernel')}" for key in ("roll7", "others")),
                      flush=True)
        summary = {d: {key: geomean([r[key] for r in rows if r["direction"] == d and r.get(key)])
                       for key in ("roll7_vs_cudnn", "others_vs_cudnn", "tune_ratio")}
                   for d in bopts.directions.split(",")}
        result.update(seconds=round(time.perf_counter() - start, 1), builds=ctx.builds, summary=summary,
                      rows=rows)
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    for direction, geo in summary.items():
        print(f"{direction}: geomean vs cuDNN: roll7 {geo['roll7_vs_cudnn']}, "
              f"others {geo['others_vs_cudnn']}, tune {geo['tune_ratio']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
