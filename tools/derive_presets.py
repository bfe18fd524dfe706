"""Derive GEMM presets from full-matrix benchmark results by greedy set cover.

Input: one or more JSON files written by `python benchmarks/gemm.py --full-matrix` (run with a broad candidate
preset, e.g. `--preset-kind all`). Per (dtype, layout) the tool chooses kernels greedily: each step adds the kernel
that most lowers  sum over shapes of log(best-time-so-far / best-possible-time)  (a shape no chosen kernel runs
costs `--missing-penalty`), until every shape is within `--tolerance` (default 2%) of its best-possible time or
`--max-kernels` are chosen. It prints the chosen kernels with the shapes each one wins and writes a JSON report.

With `--split`, the cover also runs per subset (see benchmarks/gemm_suite.categories; a shape may be in several):
  compute  M, N >= 1024 and K >= 1024      memory  M <= 64 or K <= 512      latency  2*M*N*K < 2^30

A plan run on zero-padded operands counts for its kernel. Results of several GPUs are covered together (each
(gpu, shape) is one item to cover). Usage:

  python tools/derive_presets.py benchmarks/results/gemm_h200_all.json [--split] [--tolerance 0.02]
      [--max-kernels 24] [--combos bf16_rcr,fp16_rcr] [--out derived_presets.json] [--emit-presets DIR]
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PADDED_SUFFIX = " (padded)"
SUBSETS = ("compute", "memory", "latency")

# times[item][kernel] = ms; an item is a shape ("MxNxK", or "gpu:MxNxK" when several GPUs are merged).
Times = dict[str, dict[str, float]]


@dataclasses.dataclass
class Matrix:
    """Full-matrix timings of one (dtype, layout)."""

    combo: str
    arch: str
    times: Times = dataclasses.field(default_factory=dict)
    dims: dict[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)

    def subset(self, keep: Callable[[int, int, int], bool]) -> Matrix:
        items = [s for s in self.times if keep(*self.dims[s])]
        return Matrix(self.combo, self.arch, {s: self.times[s] for s in items}, {s: self.dims[s] for s in items})


@dataclasses.dataclass
class Cover:
    kernels: list[str]                     # in the order chosen (without pruned ones)
    wins: dict[str, list[str]]             # kernel -> items where it is the fastest chosen kernel
    steps: list[dict[str, Any]]            # per step: kernel, gain, items within tolerance, loss geomean
    loss: dict[str, float]                 # item -> best chosen time / best possible time (inf: none runs it)
    uncovered: list[str]                   # items not within tolerance (only when max_kernels stopped the cover)
    no_timing: list[str]                   # items no kernel ran validly (left out of the cover)
    pruned: list[str] = dataclasses.field(default_factory=list)   # chosen, then superseded: they win no item

    def to_dict(self) -> dict[str, Any]:
        finite = [v for v in self.loss.values() if math.isfinite(v)]
        return {"kernels": self.kernels, "wins": self.wins, "steps": self.steps, "items": len(self.loss),
                "loss_geomean": _geomean(finite), "loss_max": max(self.loss.values(), default=None),
                "uncovered": self.uncovered, "no_timing": self.no_timing, "pruned": self.pruned}


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _cost(time: float, best: float, penalty: float) -> float:
    return min(math.log(time / best), penalty) if math.isfinite(time) else penalty


def _gain(column: dict[str, float], current: dict[str, float], best: dict[str, float], penalty: float) -> float:
    gain = 0.0
    for item, t in column.items():
        if item in current and t < current[item]:
            gain += _cost(current[item], best[item], penalty) - _cost(t, best[item], penalty)
    return gain


def _columns(times: Times) -> dict[str, dict[str, float]]:
    """kernel -> item -> ms (valid, finite, positive timings only)."""
    columns: dict[str, dict[str, float]] = {}
    for item, row in times.items():
        for kernel, ms in row.items():
            if ms is not None and math.isfinite(ms) and ms > 0:
                columns.setdefault(kernel, {})[item] = ms
    return columns


def _wins(chosen: list[str], columns: dict[str, dict[str, float]], items: Iterable[str]) -> dict[str, list[str]]:
    wins: dict[str, list[str]] = {k: [] for k in chosen}
    for item in items:
        ran = [k for k in chosen if item in columns[k]]
        if ran:   # ties go to the kernel chosen first
            wins[min(ran, key=lambda k: (columns[k][item], chosen.index(k)))].append(item)
    return wins


def _best_step(columns: dict[str, dict[str, float]], chosen: list[str], current: dict[str, float],
               best: dict[str, float], tolerance: float, penalty: float) -> tuple[float, str]:
    """The unchosen kernel of largest gain; ties: more items newly within tolerance, then the smaller name."""
    top: tuple[tuple[float, int], str] | None = None
    for kernel in sorted(k for k in columns if k not in chosen):
        col = columns[kernel]
        newly = sum(1 for i, t in col.items() if current[i] > best[i] * (1 + tolerance) >= t)
        key = (_gain(col, current, best, penalty), newly)
        if top is None or key > top[0]:
            top = (key, kernel)
    return (top[0][0], top[1]) if top else (0.0, "")


def greedy_cover(times: Times, tolerance: float = 0.02, max_kernels: int | None = None,
                 missing_penalty: float = 10.0, prune: bool = True, seed: Iterable[str] = ()) -> Cover:
    """Greedy set cover of the items of `times` (item -> kernel -> ms) by kernels, minimizing the summed log
    slowdown against each item's best time; stops when every item is within (1 + tolerance) of its best.
    With `prune`, chosen kernels that end up winning no item (superseded by later picks) are dropped: the
    result's times are unchanged. `seed`: kernels held as chosen before the first step (a set being extended):
    max_kernels then counts the kernels added, and the result (kernels, wins) names those alone."""
    columns = _columns(times)
    best = {item: min(col[item] for col in columns.values() if item in col)
            for item in times if any(item in col for col in columns.values())}
    no_timing = sorted(item for item in times if item not in best)
    current = {item: math.inf for item in best}
    held = [k for k in dict.fromkeys(seed) if k in columns]
    for kernel in held:
        for item, t in columns[kernel].items():
            current[item] = min(current[item], t)
    within = lambda item: current[item] <= best[item] * (1 + tolerance)
    chosen: list[str] = []
    steps: list[dict[str, Any]] = []
    while any(not within(i) for i in best) and (max_kernels is None or len(chosen) < max_kernels):
        gain, kernel = _best_step(columns, held + chosen, current, best, tolerance, missing_penalty)
        if gain <= 0:
            break
        chosen.append(kernel)
        for item, t in columns[kernel].items():
            current[item] = min(current[item], t)
        ratios = [current[i] / best[i] for i in best if math.isfinite(current[i])]
        steps.append({"kernel": kernel, "gain": gain, "within": sum(map(within, best)), "items": len(best),
                      "loss_geomean": _geomean(ratios)})
    loss = {item: current[item] / best[item] for item in best}
    wins = {k: v for k, v in _wins(held + chosen, columns, best).items() if k in chosen}
    pruned = [k for k in chosen if not wins[k]] if prune else []
    kept = [k for k in chosen if k not in pruned]
    return Cover(kept, {k: wins[k] for k in kept}, steps, loss, sorted(i for i in best if not within(i)),
                 no_timing, pruned)


# -- input ----------------------------------------------------------------------------------------------------
def kernel_of(label: str) -> str:
    """The kernel of a plan label ('<name>' or '<name> (padded)')."""
    return label.removesuffix(PADDED_SUFFIX)


def _ms(value: Any) -> float | None:
    return value.get("ms") if isinstance(value, dict) else value


def load_matrices(paths: list[str | Path]) -> dict[str, Matrix]:
    """Full-matrix rows of the files, by combo ('bf16_rcr'); a kernel's time is its fastest plan."""
    files = [json.loads(Path(p).read_text()) for p in paths]
    prefix = len({f.get("gpu") for f in files}) > 1
    matrices: dict[str, Matrix] = {}
    for path, data in zip(paths, files):
        rows = data.get("rows", [])
        if rows and not any("timings" in r for r in rows):
            raise SystemExit(f"{path} has no per-plan timings: run benchmarks/gemm.py with --full-matrix")
        for r in rows:
            matrix = matrices.setdefault(r["combo"], Matrix(r["combo"], data.get("arch", "sm_90")))
            item = f"{data.get('gpu')}:{r['shape']}" if prefix else r["shape"]
            matrix.dims[item] = (r["m"], r["n"], r["k"])
            row = matrix.times.setdefault(item, {})
            for label, value in r.get("timings", {}).items():
                ms = _ms(value)
                if ms is not None:
                    name = kernel_of(label)
                    row[name] = min(row.get(name, math.inf), ms)
    return matrices


def suite_module() -> Any:
    """benchmarks/gemm_suite.py, imported by path (it defines the subset predicates)."""
    if "gemm_suite" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gemm_suite", ROOT / "benchmarks" / "gemm_suite.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["gemm_suite"] = module   # dataclasses look their module up while the class is created
        spec.loader.exec_module(module)
    return sys.modules["gemm_suite"]


def subset_filters(thresholds: dict[str, int]) -> dict[str, Callable[[int, int, int], bool]]:
    categories = suite_module().categories
    return {name: (lambda m, n, k, name=name: name in categories(m, n, k, **thresholds)) for name in SUBSETS}


# -- output ---------------------------------------------------------------------------------------------------
def derive(matrices: dict[str, Matrix], *, split: bool, tolerance: float, max_kernels: int | None,
           missing_penalty: float, thresholds: dict[str, int], prune: bool = True) -> dict[str, dict[str, Any]]:
    """combo -> subset ('all', and with split 'compute' / 'memory' / 'latency') -> cover report."""
    filters = subset_filters(thresholds) if split else {}
    report: dict[str, dict[str, Any]] = {}
    for combo, matrix in sorted(matrices.items()):
        parts = {"all": matrix, **{name: matrix.subset(keep) for name, keep in filters.items()}}
        report[combo] = {}
        for name, part in parts.items():
            if part.times:
                report[combo][name] = greedy_cover(part.times, tolerance, max_kernels, missing_penalty,
                                                     prune).to_dict()
    return report


def print_report(report: dict[str, dict[str, Any]]) -> None:
    for combo, parts in report.items():
        for name, cover in parts.items():
            loss = cover["loss_geomean"]
            print(f"{combo} [{name}]: {len(cover['kernels'])} kernels cover {cover['items']} shapes "
                  f"(loss geomean {loss:.4f}x, max {cover['loss_max']:.4f}x)" if loss else f"{combo} [{name}]: empty")
            for kernel in cover["kernels"]:
                wins = cover["wins"][kernel]
                print(f"  {kernel}  wins {len(wins)}: {', '.join(wins)}")
            if cover["uncovered"]:
                print(f"  not within tolerance (max-kernels reached): {', '.join(cover['uncovered'])}")
            if cover["pruned"]:
                print(f"  pruned (superseded, win nothing): {', '.join(cover['pruned'])}")
            if cover["no_timing"]:
                print(f"  no valid timing (left out): {', '.join(cover['no_timing'])}")


def emit_presets(report: dict[str, dict[str, Any]], matrices: dict[str, Matrix], out_dir: Path) -> list[Path]:
    """Preset files (the packaged presets' format) gemm_<combo>_derived.json and gemm_<combo>_<subset>.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for combo, parts in report.items():
        for name, cover in parts.items():
            preset = f"gemm_{combo}_{'derived' if name == 'all' else name}"
            body = {"name": preset, "op": "gemm", "arch": matrices[combo].arch,
                    "description": f"{combo} {name}: greedy set cover of full-matrix benchmark results "
                                   f"({cover['items']} shapes, loss geomean {cover['loss_geomean']:.4f}x)",
                    "configs": cover["kernels"]}
            path = out_dir / f"{preset}.json"
            path.write_text(json.dumps(body, indent=1) + "\n")
            written.append(path)
    return written


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="full-matrix JSON files of benchmarks/gemm.py")
    parser.add_argument("--tolerance", type=float, default=0.02, help="stop when every shape is this close to best")
    parser.add_argument("--max-kernels", type=int, help="stop after this many kernels per cover")
    parser.add_argument("--missing-penalty", type=float, default=10.0,
                        help="cost (log slowdown) of a shape no chosen kernel runs")
    parser.add_argument("--no-prune", action="store_true", help="keep chosen kernels that end up winning nothing")
    parser.add_argument("--combos", help="comma list of dtype_layout to derive (default: all in the inputs)")
    parser.add_argument("--split", action="store_true", help="also cover the compute / memory / latency subsets")
    parser.add_argument("--compute-min", type=int, default=1024)
    parser.add_argument("--memory-max-m", type=int, default=64)
    parser.add_argument("--memory-max-k", type=int, default=512)
    parser.add_argument("--latency-flops", type=int, default=2**30)
    parser.add_argument("--out", default="derived_presets.json", help="JSON report path")
    parser.add_argument("--emit-presets", metavar="DIR", help="also write preset files into DIR")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    matrices = load_matrices(opts.inputs)
    if opts.combos:
        matrices = {c: m for c, m in matrices.items() if c in opts.combos.split(",")}
    if not matrices:
        raise SystemExit("no full-matrix rows for the requested combos in the inputs")
    thresholds = {"compute_min": opts.compute_min, "memory_max_m": opts.memory_max_m,
                  "memory_max_k": opts.memory_max_k, "latency_flops": opts.latency_flops}
    report = derive(matrices, split=opts.split, tolerance=opts.tolerance, max_kernels=opts.max_kernels,
                    missing_penalty=opts.missing_penalty, thresholds=thresholds, prune=not opts.no_prune)
    print_report(report)
    params = {"tolerance": opts.tolerance, "max_kernels": opts.max_kernels, "missing_penalty": opts.missing_penalty,
              "split": opts.split, "prune": not opts.no_prune, "thresholds": thresholds}
    Path(opts.out).write_text(json.dumps({"inputs": [str(p) for p in opts.inputs], "params": params,
                                          "covers": report}, indent=1))
    print(f"wrote {opts.out}")
    if opts.emit_presets:
        for path in emit_presets(report, matrices, Path(opts.emit_presets)):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
