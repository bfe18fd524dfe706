"""Render the generated tables of BENCHMARKS.md from the result JSON files under benchmarks/results/.

BENCHMARKS.md is written by hand around blocks that this script owns:

    <!-- table: gemm_h200.json -->
    ...the section rendered from benchmarks/results/gemm_h200.json...
    <!-- /table -->

A block's source is a result file (rendered by the renderer of its kind) or one of the folders `sweeps`
and `ml`. `python benchmarks/tables.py` renders every block again and leaves the rest of the file as it is;
`--check` only reports the blocks that are out of date (exit status 1).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:   # model_report.py, however this was started
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import model_report

ROOT = Path(__file__).resolve().parents[1]
TABLE = "|---"


def gemm_baseline_section(path: Path) -> str:
    data = json.loads(path.read_text())
    lim = data["limits"]
    lines = [f"## GEMM baseline: essential presets vs cuBLAS ({path.name})", "",
             f"{_versions(data)}, CUDA {data['cuda']}, {data['date']}. Protocol: {data['protocol']}.",
             f"Measured limits in the same run: cuBLAS bf16 8192³ {lim['cublas_bf16_8192_tflops']:.0f} TF/s, "
             f"HBM copy {lim['hbm_copy_gbps']:.0f} GB/s.", "",
             "`best` = fastest plan of the preset (exhaustive tuning), `auto` = the rules pick without "
             "tuning; ratio = cuBLAS time / our time (> 1: faster than cuBLAS). `(padded)` = run on "
             "zero-padded copies.", "",
             "| dtype | layout | M×N×K | cuBLAS µs | cuBLAS TF/s | best µs | best TF/s | best ratio | "
             "auto ratio | best kernel |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['dtype']} | {r['layout']} | {r['m']}×{r['n']}×{r['k']} | "
                     f"{r['cublas_ms'] * 1e3:.1f} | {r['cublas_tflops']:.0f} | {r['best_ms'] * 1e3:.1f} | "
                     f"{r['best_tflops']:.0f} | {r['best_ratio']:.2f} | {r['auto_ratio']:.2f} | "
                     f"`{r['best_kernel']}` |")
    lines += ["", "| dtype_layout | best geomean | auto geomean | worst best ratio |", "|---|---|---|---|"]
    for key, s in data["summary"].items():
        lines.append(f"| {key} | {s['best_geomean']:.3f} | {s['auto_geomean']:.3f} | {s['best_min']:.3f} |")
    return "\n".join(lines) + "\n"


def _versions(data: dict) -> str:
    return (f"{data['gpu']}, tiledispatch {data['tiledispatch']}, triton {data['triton']}, "
            f"torch {data['torch']}")


def _us(ms: float | None) -> str:
    return f"{ms * 1e3:.1f}" if ms else "–"


def _x(value: float | None, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if value else "–"


def _notes(data: dict) -> list[str]:
    """Notes a result file carries: `notes` (free text) and `reruns` (rows measured again in a later run)."""
    lines = [f"Note: {note}" for note in data.get("notes", [])]
    lines += [f"Re-run {r['date']}: {r['rows']} rows ({' '.join(r['argv'])}): {r['why']}."
              for r in data.get("reruns", [])]
    return lines


def gemm_sweeps_section(folder: Path) -> str:
    """The candidate sweeps (benchmarks/gemm.py --preset-kind candidates --full-matrix) the measured presets
    are derived from: per combo the geomean of the best candidate, i.e. what an exhaustive search of the
    candidate space reaches."""
    paths = sorted(folder.glob("sweep_*.json"))
    if not paths:
        return ""
    lines = ["## GEMM candidate sweeps (benchmarks/results/sweeps/)", "",
             ("Full matrix over the `gemm_<combo>_candidates` presets, every shape of the suite; `tune` = "
              "best candidate per shape (the ceiling of any preset derived from it by "
              "tools/derive_presets.py)."), "",
             "| combo | GPU | date | candidates | tune geomean | worst tune ratio | "
             "compute-bound tune geomean |",
             "|---|---|---|---|---|---|---|"]
    for path in paths:
        data = json.loads(path.read_text())
        for key, s in data["summary"].items():
            plans = max((r.get("plans", 0) for r in data["rows"] if r["combo"] == key), default=0)
            lines.append(f"| {key} | {data['gpu']} | {data['date'][:10]} | {plans} | "
                         f"{_x(s['tune_geomean'], 3)} | {_x(s['tune_min'])} ({s['tune_min_shape']}) | "
                         f"{_x(s['compute_bound_tune_geomean'], 3)} |")
    return "\n".join(lines) + "\n"


def gemm_section(path: Path) -> str:
    """`gemm_<gpu>.json` from benchmarks/gemm.py: per-combo summary, then one table per combo."""
    data = json.loads(path.read_text())
    lim = data.get("limits") or {}
    lines = [f"## GEMM: tiledispatch vs cuBLAS ({path.name})", "",
             (f"{_versions(data)}, CUDA {data['cuda']}, {data['date']}; presets "
              f"`gemm_<dtype>_<layout>_{data['preset_kind']}`."),
             f"Protocol: {data['protocol']}.", *_notes(data)]
    if lim:
        lines.append(f"Measured limits in the same run: cuBLAS bf16 8192³ "
                     f"{lim['cublas_bf16_8192_tflops']:.0f} TF/s, HBM copy {lim['hbm_copy_gbps']:.0f} GB/s.")
    lines += ["", ("`tune` = fastest valid plan of the preset (exhaustive), `auto` = "
                   "`select(problem, 'auto')` without a tuning DB; ratio = cuBLAS time / our time (> 1: "
                   "faster than cuBLAS); "
                   "compute-bound = M, N, K ≥ 4096. `(padded)` = run on zero-padded copies of the operands "
                   "(copies included in the time; no out given, so the result is a view of the padded "
                   "output, as td.gemm returns it)."), "",
              ("| combo | shapes | tune geomean | auto geomean | auto / tune | worst tune ratio | "
               "compute-bound tune geomean | wrong plans |"), "|---|---|---|---|---|---|---|---|"]
    for key, s in data["summary"].items():
        lines.append(f"| {key} | {s['shapes']} | {_x(s['tune_geomean'], 3)} | {_x(s['auto_geomean'], 3)} | "
                     f"{_x(s['auto_vs_tune_geomean'], 3)} | {_x(s['tune_min'])} ({s['tune_min_shape']}) | "
                     f"{_x(s['compute_bound_tune_geomean'], 3)} ({s['compute_bound_shapes']}) | "
                     f"{s['wrong_plans']} |")
    for key in data["summary"]:
        lines += ["", f"### {key}", "",
                  ("| M×N×K | why | cuBLAS µs | cuBLAS TF/s | tune µs | tune TF/s | tune ratio | auto µs | "
                   "auto ratio | tune kernel |"), "|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in data["rows"] if r["combo"] == key):
            lines.append(f"| {r['m']}×{r['n']}×{r['k']} | {r['why']} | {_us(r['cublas_ms'])} | "
                         f"{_x(r['cublas_tflops'], 1)} | {_us(r.get('tune_ms'))} | "
                         f"{_x(r.get('tune_tflops'), 1)} | {_x(r.get('tune_ratio'))} | "
                         f"{_us(r.get('auto_ms'))} | {_x(r.get('auto_ratio'))} | `{r.get('tune_kernel')}` |")
    return "\n".join(lines) + "\n"


def _signed(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def dispatch_overhead_section(path: Path) -> str:
    """`dispatch_overhead_<gpu>.json` from benchmarks/dispatch_overhead.py: host µs per call and overhead.
    A row may lack variants (a run of a subset): their cells show '–'."""
    data = json.loads(path.read_text())
    names = ("direct", "kernel_run", "registry_run", "td_gemm", "torch_mm", "graph_replay",
             "kernel_run_alloc")
    limit = data.get("limit_us")
    lines = [f"## Dispatch overhead ({path.name})", "",
             (f"{data['gpu']} (host {data['host_cpu']}), tiledispatch {data['tiledispatch']}, triton "
              f"{data['triton']}, torch {data['torch']}, CUDA {data['cuda']}, {data['date']}."),
             f"Protocol: {data['protocol']}", *_notes(data), "",
             ("µs per call: `direct` = CompiledKernel.run with prebuilt arguments, `kernel_run` = "
              "Kernel.run(out=), `registry_run` = Registry.run (rules), `td_gemm` = td.gemm(out=), "
              "`graph_replay` = Kernel.run in a CUDA graph, `kernel_run_alloc` = Kernel.run allocating out. "
              f"Limit: {'–' if limit is None else f'{limit:g}'} µs over `direct`."), "",
             "| M×N×K | " + " | ".join(names)
             + " | overhead µs (kernel / registry / td.gemm) | result | kernel |",
             "|---|" + "---|" * len(names) + "---|---|---|"]
    for r in data["rows"]:
        us, overhead = r.get("per_call_us", {}), r.get("overhead_us", {})
        over = " / ".join(_signed(overhead.get(v), 2) for v in ("kernel_run", "registry_run", "td_gemm"))
        verdict = {True: "pass", False: "FAIL"}.get(r.get("pass"), "–")
        lines.append(f"| {r['m']}×{r['n']}×{r['k']} | " + " | ".join(_x(us.get(v)) for v in names)
                     + f" | {over} | {verdict} | `{r.get('kernel')}` |")
    return "\n".join(lines) + "\n"


def conv_overhead_section(path: Path) -> str:
    """`conv_overhead_<gpu>.json` from benchmarks/conv_overhead.py: host µs per call of the conv call
    paths."""
    data = json.loads(path.read_text())
    names = ("bound", "kernel_launch", "td_api", "torch")
    lines = [f"## Convolution dispatch overhead ({path.name})", "",
             (f"{data['gpu']} (host {data['host_cpu']}), tiledispatch {data['tiledispatch']}, triton "
              f"{data['triton']}, torch {data['torch']}, CUDA {data['cuda']}, {data['date']}."),
             f"Protocol: {data['protocol']}", *_notes(data), "",
             ("µs per call: `bound` = the selected instance's bound launch (ConvBound), `kernel_launch` = "
              "Kernel.launch, `td_api` = td.conv / conv_bwd_data / conv_bwd_weight (out=), `torch` = the "
              "cuDNN call of benchmarks/conv.py; issue = the loop alone (host time)."), "",
             "| layer | direction | launches | " + " | ".join(names)
             + " | overhead µs (launch / td) | issue µs (bound / td) | kernel |",
             "|---|---|---|" + "---|" * len(names) + "---|---|---|"]
    for r in data["rows"]:
        us, issue = r["per_call_us"], r["issue_us"]
        over = " / ".join(f"{r['overhead_us'][v]:+.1f}" for v in ("kernel_launch", "td_api"))
        lines.append(f"| {r['layer']} | {r['direction']} | {r['launches']} | "
                     + " | ".join(_x(us.get(v), 1) for v in names)
                     + f" | {over} | {issue['bound']:.1f} / {issue['td_api']:.1f} | `{r['kernel']}` |")
    return "\n".join(lines) + "\n"


def _join(values: list) -> str:
    return "×".join(map(str, values))


def _problem(r: dict) -> str:
    join = _join
    groups = f" g{r['groups']}" if r["groups"] > 1 else ""
    stride = f" s{join(r['stride'])}" if any(s > 1 for s in r["stride"]) else ""
    return f"N{r['n']} {r['c']}→{r['k']}{groups} {join(r['spatial'])} f{join(r['filter'])}{stride}"


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if value else "–"


def _acceptance_line(a: dict) -> str:
    """One acceptance check of the conv benchmark: value, target, and the value a kernel at copy speed would
    reach (ratio checks: cuDNN / copy time; memory-bound checks: the copy's own % of HBM)."""
    mem = a["check"].startswith("memory")
    val = _pct(a["value"]) if mem else _x(a["value"]) + "×"
    goal = f"{a['target']:.0f}%" if mem else f"{a['target']:g}×"
    ceiling = _pct(a.get("copy_floor_pct")) if mem else (_x(a["ceiling"]) + "×" if a.get("ceiling") else "–")
    extra = f", {a['cases_meeting']} ≥ {a['target']:.0f}%" if mem else ""
    if mem and a["worst_case"]:
        extra += f", worst {_pct(a['worst_pct'])} ({a['worst_case']})"
    if mem and a.get("copy_speed_pct"):
        extra += f", {_pct(a['copy_speed_pct'])} of copy speed"
    verdict = "pass" if a["pass"] else "**miss**"
    return (f"| {a['direction']} | {a['check']} | {val} | {goal} | {ceiling} | {verdict} "
            f"| {a['rows']}/{a['of']}{extra} |")


def conv_section(path: Path) -> str:
    """`conv_<gpu>.json` from benchmarks/conv.py, between the conv markers: acceptance, geomeans per direction
    x category, then one table per direction."""
    data = json.loads(path.read_text())
    copy = (data.get("limits") or {}).get("hbm_copy_gbps")
    lines = [f"## Convolution: tiledispatch vs cuDNN ({path.name})", "",
             (f"{_versions(data)}, "
              f"CUDA {data['cuda']}, {data['date']}; {data['dtype']}, suites {', '.join(data['suites'])}, "
              f"{data['seconds']:.0f} s."), f"Protocol: {data['protocol']}.",
             *([f"Measured in the same run: HBM copy {copy:.0f} GB/s (read + write)."] if copy else []),
             *_notes(data), "",
             ("`tune` = fastest valid plan of preset `conv_<direction>_<dtype>_<n>d_all`, `auto` = "
              "`select(problem, 'auto')` of `..._essential` without a tuning DB; ratio = cuDNN time / our "
              "time (> 1: faster than cuDNN); GB/s = minimal bytes (read two tensors, write the third once) "
              "/ time; % floor = that over the HBM copy bandwidth; copy µs = a device copy moving the row's "
              "minimal bytes (half read, half written) under the same protocol; at copy speed = cuDNN time / "
              "copy time, the ratio a kernel that streams its tensors once at copy speed would reach (a "
              "ceiling for memory-bound rows)."), "",
             "| direction | check | value | target | at copy speed | result | rows |",
             "|---|---|---|---|---|---|---|"]
    for a in data["summary"]["acceptance"]:
        lines.append(_acceptance_line(a))
    lines += ["", ("| direction | category | rows | tune geomean | auto geomean | at copy speed | worst tune "
                   "| tune % floor | cuDNN % floor | wrong plans |"), TABLE * 10 + "|"]
    for g in data["summary"]["groups"]:
        lines.append(f"| {g['direction']} | {g['category']} | {g['rows']} | {_x(g['tune_geomean'], 3)} | "
                     f"{_x(g['auto_geomean'], 3)} | {_x(g.get('ceiling_geomean'), 3)} | "
                     f"{_x(g['tune_min'])} ({g['tune_min_case']}) | "
                     f"{_pct(g['tune_floor_pct_geomean'])} | {_pct(g['cudnn_floor_pct_geomean'])} | "
                     f"{g['wrong_plans']} |")
    for direction in dict.fromkeys(r["direction"] for r in data["rows"]):
        lines += ["", f"### conv {direction}", "",
                  ("| layer | category | problem | cuDNN µs | copy µs | tune µs | tune ratio | auto µs | "
                   "auto ratio | TF/s | GB/s | % floor | tune kernel |"), "|" + "---|" * 13]
        for r in (r for r in data["rows"] if r["direction"] == direction):
            failed = r.get("error") or r.get("tune_error") or "–"
            kernel = f"`{r['tune_kernel']}`" if r.get("tune_kernel") else failed
            lines.append(f"| {r['case']} | {r['category']} | {_problem(r)} | {_us(r.get('cudnn_ms'))} | "
                         f"{_us(r.get('copy_ms'))} | {_us(r.get('tune_ms'))} | {_x(r.get('tune_ratio'))} | "
                         f"{_us(r.get('auto_ms'))} | {_x(r.get('auto_ratio'))} | "
                         f"{_x(r.get('tune_tflops'), 1)} | {_x(r.get('tune_gbps'), 0)} | "
                         f"{_pct(r.get('tune_floor_pct'))} | {kernel} |")
    return "\n".join(lines) + "\n"


def sweep_throughput_section(path: Path) -> str:
    data = json.loads(path.read_text())
    lines = [f"## Sweep throughput ({path.name})", "",
             f"{data['gpu']}, triton {data['triton']}, torch {data['torch']}, {data['date']}. "
             f"{data['what']}.", "",
             "| sweep | pairs | measured | measure s | pairs/s | workers |", "|---|---|---|---|---|---|"]
    for name, run in data["runs"].items():
        lines.append(f"| {name} | {run['pairs']:,} | {run['measured']:,} | {run['measure_seconds']:.1f} | "
                     f"{run['pairs_per_second']:.0f} | {', '.join(run['workers'])} |")
    return "\n".join(lines) + "\n"


def multi_gpu_section(path: Path) -> str:
    data = json.loads(path.read_text())
    one, two = data["one_gpu"], data["two_gpus"]
    return "\n".join([
        f"## Sweep on two GPUs ({path.name})", "",
        f"{data['machine']}, triton {data['triton']}, torch {data['torch']}, {data['date']}. {data['what']}; "
        f"`{data['command']}`.", "",
        "| GPUs | pairs | measure s | pairs/s |", "|---|---|---|---|",
        f"| 1 | {one['pairs']:,} | {one['measure_seconds']:.1f} | {one['pairs_per_second']:.0f} |",
        f"| 2 | {two['pairs']:,} | {two['measure_seconds']:.1f} | {two['pairs_per_second']:.0f} |", "",
        f"Speedup of `--gpus 0,1` over one GPU: **{data['speedup']:.2f}×** (target 1.8×).", ""])


def select_speed_section(path: Path) -> str:
    data = json.loads(path.read_text())
    cold, warm, targets = data["rank_300_cold"], data["warm_select"], data["targets"]
    return "\n".join([
        f"## Selection speed ({path.name})", "",
        f"One CPU core ({data['cpu']}, Python {data['python']}), {data['model']}.", "",
        "| measure | value | target |", "|---|---|---|",
        f"| rank {cold['candidates']} candidates, cold (median of {cold['problems']} problems) | "
        f"{cold['median_ms']:.2f} ms | {targets['rank_300_cold_ms']} ms |",
        f"| warm `select`, a problem seen before | {warm['per_call_us']:.1f} µs | "
        f"{targets['warm_select_us']} µs |",
        ""])


def _eff(row: dict) -> str:
    return f"{100 * row['mean']:.1f}% / {100 * row['p10']:.1f}%"


def ml_section(folder: Path) -> str:
    """Held-out validation of the shipped cost models (results/ml/*.validate.json, `tiledispatch
    validate`)."""
    lines = ["## Cost models on held-out problems (results/ml)", "",
             "`tiledispatch validate` on the problems held out of training (split by problem: 20% of each "
             "GEMM dataset, 2% of each conv dataset, whose cross-validation is the estimate). Efficiency = best time of the problem / time of the pick; mean / P10. top-1: the "
             "pick is the best kernel; top-5: the best of the model's 5 first is timed (`tune` confirm).", "",
             "| model | held-out problems | model | model top-1 | model top-5 | rules | rules top-5 | "
             "our best time / vendor time, median (> 1: vendor faster) |",
             "|---|---|---|---|---|---|---|---|"]
    for path in sorted(folder.glob("*.validate.json")):
        data = json.loads(path.read_text())
        st = data["strategies"]
        lines.append(f"| {path.name.split('.')[0]} | {data['problems']} | {_eff(st['model'])} | "
                     f"{100 * st['model']['hit']:.0f}% | {_eff(st['model_top5'])} | {_eff(st['rules'])} | "
                     f"{_eff(st['rules_top5'])} | {_vendor_median(st)} |")
    return "\n".join(lines) + "\n"


def _vendor_median(strategies: dict) -> str:
    """The median of our best time over the vendor's; '-' for a dataset without vendor times (fp8: the sweep
    has no torch._scaled_mm rows, benchmarks/gemm.py compares with it)."""
    vendor = strategies.get("vendor")
    return f"{vendor['median']:.2f}" if vendor else "-"


# Renderers by the JSON's "benchmark" field (files without one: by file-name prefix).
RENDERERS: dict[str, Callable[[Path], str]] = {
    "gemm": gemm_section,
    "gemm_baseline": gemm_baseline_section,
    "dispatch_overhead": dispatch_overhead_section,
    "conv_overhead": conv_overhead_section,
    "conv": conv_section,
    "sweep_throughput": sweep_throughput_section,
    "multi_gpu_speedup": multi_gpu_section,
    "select_speed": select_speed_section,
    "models": model_report.models_section,
}
FOLDERS: dict[str, Callable[[Path], str]] = {"sweeps": gemm_sweeps_section, "ml": ml_section}
BLOCK = re.compile(r"^<!-- table: (?P<source>\S+) -->\n(?P<body>.*?)^<!-- /table -->$", re.S | re.M)


class TablesError(ValueError):
    """A block names a source that is missing or that no renderer takes."""


def result_kind(path: Path) -> str | None:
    """The benchmark a result file holds; None for files with nothing to render (CPU smoke runs, lists)."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("mode") in ("smoke", "cpu"):
        return None
    if "benchmark" in data:
        return str(data["benchmark"])
    for prefix in ("gemm_baseline", "dispatch_overhead", "sweep_throughput", "multi_gpu_speedup"):
        if path.name.startswith(prefix + "_"):
            return prefix
    return "gemm" if path.name.startswith("gemm_") else path.stem


def section(results: Path, source: str) -> str:
    """The section one block shows: its source under `results` rendered."""
    path = results / source
    if source in FOLDERS:
        return FOLDERS[source](path)
    if not path.is_file():
        raise TablesError(f"table source {source!r}: no such file under {results}")
    kind = result_kind(path)
    if kind not in RENDERERS:
        raise TablesError(f"table source {source!r}: no renderer for its kind {kind!r} "
                          f"(renderers: {', '.join(RENDERERS)}; folders: {', '.join(FOLDERS)})")
    return RENDERERS[kind](path)


def _block(source: str, body: str) -> str:
    return f"<!-- table: {source} -->\n{body}<!-- /table -->"


def render(text: str, results: Path, only: str | None = None) -> str:
    """`text` with every table block (or only the block of source `only`) rendered again from its source;
    everything outside the blocks kept."""
    def fill(match: re.Match) -> str:
        source = match["source"]
        return match[0] if only not in (None, source) else _block(source, section(results, source))
    return BLOCK.sub(fill, text)


def put_block(text: str, source: str, results: Path) -> str:
    """`text` with the block of `source` rendered again, or appended at the end when it has none."""
    if any(m["source"] == source for m in BLOCK.finditer(text)):
        return render(text, results, only=source)
    return f"{text.rstrip()}\n\n{_block(source, section(results, source))}\n"


def _changed(old: str, new: str) -> list[str]:
    """The sources whose block body differs between `old` and its rendering `new` (same blocks, in order)."""
    return [a["source"] for a, b in zip(BLOCK.finditer(old), BLOCK.finditer(new)) if a["body"] != b["body"]]


def stale_blocks(text: str, results: Path) -> list[str]:
    """The sources whose block in `text` differs from its rendering."""
    return _changed(text, render(text, results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report out-of-date blocks, change nothing")
    parser.add_argument("--file", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    results = ROOT / "benchmarks" / "results"
    text = args.file.read_text()
    try:
        rendered = render(text, results)
    except TablesError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stale = _changed(text, rendered)
    if not args.check:
        args.file.write_text(rendered)
    verb = "out of date" if args.check else "rendered again"
    print(f"{len(BLOCK.findall(text))} table blocks; {verb}: {', '.join(stale) or 'none'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
