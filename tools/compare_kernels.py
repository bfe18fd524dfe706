"""Where two variants of a model step spend different GPU time, kernel stem by kernel stem.

Reads a `benchmarks/models.py` result (run with `--top-kernels` large enough to list every kernel) or a
`tools/probe_se_view.py` result, and compares two variants of one model and phase. Inductor numbers its
kernels per graph (`..._backward_60`), so kernels are grouped by their name without the trailing number; the
vendor's and ours keep their names. Prints per stem the calls and milliseconds of each variant and the
difference, largest first, and the totals per kernel class.

    python tools/compare_kernels.py RESULT.json --model efficientnet_b0 [--phase train]
        [--a stock_compiled] [--b converted_compiled] [--top 25]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

_NUMBER = re.compile(r"_\d+$")


def stem(name: str) -> str:
    """A kernel's name without Inductor's per-graph number (`triton_poi_fused_x_12` -> `..._x`)."""
    return _NUMBER.sub("", name) if name.startswith("triton_") else name


def variants_of(result: dict[str, Any], model: str | None, phase: str) -> dict[str, dict[str, Any]]:
    """variant -> its measurement (top_kernels, by_class_ms) in a models.py or probe_se_view.py result."""
    if "variants" in result:
        return result["variants"]
    rows = [m for m in result["models"] if m.get("model") == model]
    if not rows:
        names = [m.get("model") for m in result["models"]]
        raise SystemExit(f"no model {model!r} in the result; it has {names}")
    return rows[0]["runs"][phase]


def by_stem(kernels: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"ms": 0.0, "calls": 0.0})
    for k in kernels:
        entry = out[stem(k["name"])]
        entry["ms"] += k["ms"]
        entry["calls"] += k["calls"]
        entry["class"] = k["class"]
    return dict(out)


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Per stem: calls and ms of a and b, and b - a, largest absolute difference first."""
    sa, sb = by_stem(a["top_kernels"]), by_stem(b["top_kernels"])
    rows = []
    for name in set(sa) | set(sb):
        x, y = sa.get(name, {}), sb.get(name, {})
        rows.append({"stem": name, "class": y.get("class", x.get("class")), "a_calls": x.get("calls", 0),
                     "a_ms": x.get("ms", 0.0), "b_calls": y.get("calls", 0), "b_ms": y.get("ms", 0.0),
                     "delta_ms": y.get("ms", 0.0) - x.get("ms", 0.0)})
    return sorted(rows, key=lambda r: (-abs(r["delta_ms"]), r["stem"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path)
    parser.add_argument("--model")
    parser.add_argument("--phase", default="train")
    parser.add_argument("--a", default="stock_compiled")
    parser.add_argument("--b", default="converted_compiled")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    variants = variants_of(json.loads(args.result.read_text()), args.model, args.phase)
    missing = [v for v in (args.a, args.b) if v not in variants]
    if missing:
        parser.error(f"no variant {missing} in the result; it has {sorted(variants)}")
    a, b = variants[args.a], variants[args.b]
    listed = [len(v["top_kernels"]) for v in (a, b)]
    print(f"{args.a}: {a.get('gpu_ms', 0):.3f} ms GPU, {listed[0]} kernel names kept; {args.b}: "
          f"{b.get('gpu_ms', 0):.3f} ms, {listed[1]} (a short list misses kernels: run with --top-kernels)")
    for cls in sorted(set(a["by_class_ms"]) | set(b["by_class_ms"])):
        x, y = a["by_class_ms"].get(cls, 0.0), b["by_class_ms"].get(cls, 0.0)
        print(f"  {cls:18s} {x:7.3f} -> {y:7.3f} ms ({y - x:+.3f})")
    for r in compare(a, b)[:args.top]:
        print(f"  {r['delta_ms']:+7.3f} ms  {r['a_ms']:7.3f} ({r['a_calls']:g}) -> {r['b_ms']:7.3f} "
              f"({r['b_calls']:g})  {r['class']:16s} {r['stem'][:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
