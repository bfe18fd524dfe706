"""Host overhead before and after a change of the dispatch path (issue 34): benchmarks/dispatch_overhead.py
run on two source trees in one session, alternating before, after, before, after (host drift falls on both
sides), then one summary per row and variant: each side's median over its runs and after - before, judged
(within --limit-us, per call and issue only) for the variants the benchmark names (td.gemm, td.conv*).

Usage:  python tools/overhead_ab.py --before .baseline --out DIR [--after .] [--rounds 2] [--limit-us 0.5]
            [options passed to the benchmark, e.g. --trials 15, or --smoke on CPU]
A tree is a checkout (its src/ is used) or a src/ folder. Each side runs with PYTHONPATH=<its src> and a
build cache of its own (<--cache-root>/<side>). DIR receives dispatch_overhead_<side>_r<round>.json and .log,
and the summary dispatch_overhead_ab.json / .md, rewritten after each round. Exit 0: every judged delta
within the limit; 1: not; 2: a run failed or measured another tree than it was given.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = ROOT / "benchmarks" / "dispatch_overhead.py"
SIDES = ("before", "after")
METRICS = ("per_call_us", "issue_us")
KERNEL_FIELDS = ("kernel", "registry_kernel", "td_gemm_kernel", "td_conv_kernel")
GIT_STATE = {(True, False): "", (True, True): " with uncommitted changes",
             (False, None): " (package not tracked by git there)"}


def source_dir(tree: str) -> Path:
    """The folder holding the tiledispatch package: <tree>/src, or the tree itself."""
    path = Path(tree).resolve()
    for candidate in (path / "src", path):
        if (candidate / "tiledispatch" / "__init__.py").is_file():
            return candidate
    raise SystemExit(f"{tree}: neither {tree}/src/tiledispatch nor {tree}/tiledispatch is a package")


def run_side(side: str, src: Path, round_: int, opts: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """One benchmark run of `side` (its JSON and log under --out); exits 2 when it fails or measured another
    tree."""
    out = opts.out / f"dispatch_overhead_{side}_r{round_}.json"
    log = out.with_suffix(".log")
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONUNBUFFERED": "1"}
    if opts.cache_root is not None:
        env["TILEDISPATCH_CACHE_DIR"] = str(opts.cache_root / side)
    cmd = [sys.executable, str(BENCHMARK), "--label", side, "--out", str(out), *extra]
    print(f"== {side} round {round_}: PYTHONPATH={src} {' '.join(cmd[1:])}", flush=True)
    try:
        with log.open("w") as stream:
            done = subprocess.run(cmd, stdout=stream, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                  timeout=opts.run_timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SystemExit(fail(f"{side} round {round_} ran past {opts.run_timeout} s", log)) from None
    if done.returncode not in (0, 1) or not out.is_file():   # 1: the benchmark's own 5 us limit, not failure
        raise SystemExit(fail(f"{side} round {round_} exited {done.returncode}", log))
    result = json.loads(out.read_text())
    package = Path(result["code"]["package"])
    if package != src / "tiledispatch":
        raise SystemExit(fail(f"{side} round {round_} measured {package}, not {src / 'tiledispatch'}", log))
    return result


def fail(message: str, log: Path) -> int:
    lines = log.read_text(errors="replace").splitlines()[-30:] if log.is_file() else []
    print("\n".join([f"FAILED: {message} (log {log}):", *lines]), file=sys.stderr, flush=True)
    return 2


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def compare(runs: dict[str, list[dict[str, Any]]], limit_us: float) -> tuple[list[dict], list[dict]]:
    """Per (row, variant): each side's values over its runs, their medians, after - before and the verdict of
    a judged variant (both metrics within limit_us; None for one not judged). Then the kernels each row picked
    on each side (their first run)."""
    judged = set(runs["before"][0]["judged"].values())
    rows, kernels = [], []
    first = {side: {row["id"]: row for row in all_rows(runs[side][0])} for side in SIDES}
    for row_id in dict.fromkeys([*first["before"], *first["after"]]):
        variants = dict.fromkeys(v for side in SIDES
                                 for v in first[side].get(row_id, {}).get("per_call_us", {}))
        for variant in variants:
            entry: dict[str, Any] = {"row": row_id, "variant": variant, "judged": variant in judged}
            for metric in METRICS:
                values = {side: [r[metric][variant] for run in runs[side] for r in all_rows(run)
                                 if r["id"] == row_id and variant in r[metric]] for side in SIDES}
                before, after = (median_or_none(values[side]) for side in SIDES)
                entry[f"before_{metric}"], entry[f"after_{metric}"] = before, after
                entry[f"delta_{metric}"] = None if before is None or after is None else after - before
                entry[f"runs_{metric}"] = values
            deltas = [entry[f"delta_{metric}"] for metric in METRICS]
            within = all(d is not None and d <= limit_us for d in deltas)
            entry["pass"] = within if entry["judged"] else None
            rows.append(entry)
        for field in KERNEL_FIELDS:
            picks = {side: first[side].get(row_id, {}).get(field) for side in SIDES}
            if any(picks.values()):
                same = picks["before"] == picks["after"]
                kernels.append({"row": row_id, "field": field, **picks, "same": same})
    return rows, kernels


def all_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    return result["rows"] + result.get("conv_rows", [])


def summary(runs: dict[str, list[dict[str, Any]]], trees: dict[str, Path], opts: argparse.Namespace,
            extra: list[str]) -> dict[str, Any]:
    rows, kernels = compare(runs, opts.limit_us)
    head, rounds = runs["after"][0], len(runs["after"])
    sides = {side: {"tree": str(trees[side]), "code": runs[side][0]["code"],
                    "files": [f"dispatch_overhead_{side}_r{i}.json" for i in range(1, rounds + 1)]}
             for side in SIDES}
    same_code = sides["before"]["code"]["sources_sha256"] == sides["after"]["code"]["sources_sha256"]
    return {"benchmark": "dispatch_overhead_ab", "mode": head["mode"], "gpu": head["gpu"],
            "host_cpu": head["host_cpu"], "torch": head["torch"], "triton": head["triton"],
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "limit_us": opts.limit_us,
            "rounds": rounds, "order": [f"{side} r{i}" for i in range(1, rounds + 1) for side in SIDES],
            "benchmark_args": extra, "protocol": head["protocol"], "judged": head["judged"], "sides": sides,
            "same_code": same_code, "rows": rows, "kernels": kernels,
            "same_kernels": all(k["same"] for k in kernels), "left_out": left_out(runs),
            "pass": all(r["pass"] for r in rows if r["judged"])}


def left_out(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, str]]:
    """The variants a side's runs left out (an API or internal the benchmark could not call), with why."""
    seen = {(side, r["id"], variant): why for side in SIDES for run in runs[side] for r in all_rows(run)
            for variant, why in r.get("unavailable", {}).items()}
    return [{"side": side, "row": row, "variant": variant, "why": why}
            for (side, row, variant), why in seen.items()]


def fmt(value: float | None, sign: bool = False) -> str:
    return "—" if value is None else (f"{value:+.2f}" if sign else f"{value:.2f}")


def markdown(data: dict[str, Any]) -> str:
    sides = data["sides"]
    title = f"## Dispatch overhead before / after ({data['gpu']}, host {data['host_cpu']}, {data['date']})"
    options = " ".join(data["benchmark_args"]) or "-"
    lines = [title, "",
             *(f"- {side}: `{s['code']['package']}` sources {s['code']['sources_sha256']}, git "
               f"{s['code']['git_rev'] or '?'}{GIT_STATE[(s['code']['git_tracked'], s['code']['git_dirty'])]}"
               for side, s in sides.items()),
             (f"- order {', '.join(data['order'])}; benchmark options {options}; median of each side's runs; "
              f"judged: after - before <= +{data['limit_us']:g} µs in both metrics"),
             "", "| row | variant | per call before | after | Δ | issue before | after | Δ | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        verdict = "" if r["pass"] is None else ("pass" if r["pass"] else "**FAIL**")
        lines.append(f"| {r['row']} | {r['variant']} | " + " | ".join(
            fmt(r[f"{prefix}_{metric}"], prefix == "delta") for metric in METRICS
            for prefix in ("before", "after", "delta")) + f" | {verdict} |")
    changed = [k for k in data["kernels"] if not k["same"]]
    lines += ["", "Kernels picked: " + ("the same on both sides." if not changed else "DIFFER: " + "; ".join(
        f"{k['row']} {k['field']}: {k['before']} -> {k['after']}" for k in changed))]
    lines += [f"Left out ({m['side']}): {m['row']} {m['variant']}: {m['why']}" for m in data["left_out"]]
    if data["same_code"]:
        lines.append("Warning: both sides measured the same sources.")
    lines.append(f"Result: {'PASS' if data['pass'] else 'FAIL'}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the tree measured first in each round")
    parser.add_argument("--after", default=str(ROOT), help="the tree measured second (default: this one)")
    parser.add_argument("--out", required=True, type=Path, help="folder for the runs and the summary")
    parser.add_argument("--rounds", type=int, default=2, help="before/after pairs (default 2)")
    parser.add_argument("--limit-us", type=float, default=0.5, help="allowed after - before (default 0.5)")
    parser.add_argument("--cache-root", type=Path,
                        help="build caches <root>/before, <root>/after (default: a new temporary folder)")
    parser.add_argument("--shared-cache", action="store_true",
                        help="both sides use TILEDISPATCH_CACHE_DIR as set")
    parser.add_argument("--run-timeout", type=float, default=900.0, help="seconds one benchmark run may take")
    opts, extra = parser.parse_known_args(argv)
    if opts.rounds < 1:
        parser.error("--rounds must be >= 1")
    if opts.shared_cache:
        opts.cache_root = None
    elif opts.cache_root is None:
        opts.cache_root = Path(tempfile.mkdtemp(prefix="overhead_ab_cache_"))
    return opts, extra


def main(argv: list[str] | None = None) -> int:
    opts, extra = parse_args(argv)
    trees = {"before": source_dir(opts.before), "after": source_dir(opts.after)}
    opts.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for round_ in range(1, opts.rounds + 1):
        for side in SIDES:
            runs[side].append(run_side(side, trees[side], round_, opts, extra))
        data = summary(runs, trees, opts, extra)   # after every round: a session cut short keeps those done
        (opts.out / "dispatch_overhead_ab.json").write_text(json.dumps(data, indent=1))
        text = markdown(data)
        (opts.out / "dispatch_overhead_ab.md").write_text(text)
    print(text + f"wrote {opts.out / 'dispatch_overhead_ab.json'} and .md", flush=True)
    return 0 if data["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
