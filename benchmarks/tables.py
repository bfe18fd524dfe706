"""Render BENCHMARKS.md from the result JSON files under benchmarks/results/."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gemm_baseline_section(path: Path) -> str:
    data = json.loads(path.read_text())
    lim = data["limits"]
    lines = [f"## GEMM baseline: essential presets vs cuBLAS ({path.name})", "",
             f"{data['gpu']}, tiledispatch {data['tiledispatch']}, triton {data['triton']}, torch {data['torch']}, "
             f"CUDA {data['cuda']}, {data['date']}. Protocol: {data['protocol']}.",
             f"Measured limits in the same run: cuBLAS bf16 8192³ {lim['cublas_bf16_8192_tflops']:.0f} TF/s, "
             f"HBM copy {lim['hbm_copy_gbps']:.0f} GB/s.", "",
             "`best` = fastest plan of the preset (exhaustive tuning), `auto` = the rules pick without tuning; "
             "ratio = cuBLAS time / our time (> 1: faster than cuBLAS). `(padded)` = run on zero-padded copies.", "",
             "| dtype | layout | M×N×K | cuBLAS µs | cuBLAS TF/s | best µs | best TF/s | best ratio | auto ratio | best kernel |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['dtype']} | {r['layout']} | {r['m']}×{r['n']}×{r['k']} | {r['cublas_ms'] * 1e3:.1f} | "
                     f"{r['cublas_tflops']:.0f} | {r['best_ms'] * 1e3:.1f} | {r['best_tflops']:.0f} | "
                     f"{r['best_ratio']:.2f} | {r['auto_ratio']:.2f} | `{r['best_kernel']}` |")
    lines += ["", "| dtype_layout | best geomean | auto geomean | worst best ratio |", "|---|---|---|---|"]
    for key, s in data["summary"].items():
        lines.append(f"| {key} | {s['best_geomean']:.3f} | {s['auto_geomean']:.3f} | {s['best_min']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parts = ["# Benchmarks", "", "Numbers below are rendered by `python benchmarks/tables.py` from the committed "
             "JSON in `benchmarks/results/`; every number was measured in one run against the vendor library.", ""]
    for path in sorted((ROOT / "benchmarks" / "results").glob("gemm_baseline_*.json")):
        parts.append(gemm_baseline_section(path))
    (ROOT / "BENCHMARKS.md").write_text("\n".join(parts))


if __name__ == "__main__":
    main()
