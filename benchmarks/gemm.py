"""GEMM benchmark: tiledispatch vs cuBLAS, in one run, on the suite of `benchmarks/gemm_suite.py`.

Combos: bf16 and fp16 in rcr and rrr, fp8 (fp8e4m3, output bf16) in rcr. Per combo a registry is built from the
preset `gemm_{dtype}_{layout}_{kind}`; per shape every plan of the registry (kernels run directly or on exactly
padded operands) is validated against an fp32 reference, then timed; wrong plans are recorded, never timed.
`tune` = the fastest plan, `auto` = `Registry.select(problem, "auto")`, `rules` = the rules pick (when it
differs). cuBLAS is `torch.mm` (bf16/fp16) or `torch._scaled_mm` (fp8), timed with the same timer. The reported
times of cuBLAS and of those picks come from a final measurement of them together, in alternating rounds
(protocol.CudaTimer.paired_ms), so that a drift of clocks or temperature between cuBLAS's timing and the plans'
timing seconds later cannot bias the ratio; the first-pass times stay in the row (`cublas_pass_ms`,
`tune_pass_ms`) and in `timings`.
A plan is timed writing into its first (validated) result; a padded plan is timed without an out, as td.gemm
runs it, so its time holds the operand copies into the padded buffers but no copy back.

Usage (GPU):  python benchmarks/gemm.py [--dtypes bf16,fp16,fp8e4m3] [--layouts rcr,rrr] [--shapes small|all|MxNxK,...]
                  [--preset-kind essential] [--full-matrix] [--out benchmarks/results/gemm_<gpu>.json]
Usage (CPU):  python benchmarks/gemm.py --smoke      (Triton interpreter, 2 tiny fp16 shapes, wall-clock timer)
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
from protocol import CpuTimer, CudaTimer, Protocol, Timing, environment, geomean, gpu_slug, hbm_copy_gbps

ROOT = Path(__file__).resolve().parents[1]
COMBOS = (("bf16", "rcr"), ("bf16", "rrr"), ("fp16", "rcr"), ("fp16", "rrr"), ("fp8e4m3", "rcr"))
FP8 = "fp8e4m3"
TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3, FP8: 1e-2}   # relative Frobenius error vs the fp32 reference
COMPUTE_BOUND_MIN = 4096
PAIRED_ROUNDS = 5     # rounds of the final measurement of cuBLAS with the tune / auto / rules picks
VENDOR = "cublas"     # its key among the paired callables (plan labels are kernel names)


# -- problems, references, cuBLAS -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Combo:
    dtype: str
    layout: str

    @property
    def key(self) -> str:
        return f"{self.dtype}_{self.layout}"

    def preset(self, kind: str) -> str:
        return f"gemm_{self.dtype}_{self.layout}_{kind}"

    def problem(self, m: int, n: int, k: int):  # -> td.GemmProblem
        import tiledispatch as td

        return td.GemmProblem(m, n, k, dtype=self.dtype, layout=self.layout,
                              out_dtype="bf16" if self.dtype == FP8 else None)


def select_combos(dtypes: list[str], layouts: list[str]) -> list[Combo]:
    """The benchmarked (dtype, layout) pairs among those asked for (fp8 runs in rcr only)."""
    unknown = [d for d in dtypes if d not in TOLERANCE] + [x for x in layouts if x not in ("rcr", "rrr")]
    if unknown:
        raise SystemExit(f"unknown dtype/layout {unknown}; dtypes: {sorted(TOLERANCE)}, layouts: rcr, rrr")
    return [Combo(d, x) for d, x in COMBOS if d in dtypes and x in layouts]


def reference(args: Any) -> Any:
    """fp32 A @ B of the (dequantized) inputs, on their device."""
    a, b = args.a.float(), args.b.float()
    scale_a, scale_b = getattr(args, "scale_a", None), getattr(args, "scale_b", None)
    if scale_a is not None:
        a = a * scale_a
    if scale_b is not None:
        b = b * scale_b
    return a @ b


def rel_err(out: Any, ref: Any) -> float:
    err = float((out.float() - ref).norm() / ref.norm())
    return err if math.isfinite(err) else math.inf


def vendor_call(problem: Any, args: Any, fast_accum: bool) -> tuple[Callable[[], Any], str]:
    """The cuBLAS call for `problem` (torch.mm into a preallocated output; torch._scaled_mm for fp8, whose
    K and N must be multiples of 16: zero-padded copies are made outside the timed call), and a note."""
    import torch

    from tiledispatch.runtime.padding import padded_to

    a, b, m, n, k = args.a, args.b, problem.m, problem.n, problem.k
    if problem.dtype != FP8:
        out = torch.empty(m, n, dtype=a.dtype, device=a.device)
        return (lambda: torch.mm(a, b, out=out)), ""
    unit = torch.ones(1, dtype=torch.float32, device=a.device)
    scale_a = args.scale_a if getattr(args, "scale_a", None) is not None else unit
    scale_b = args.scale_b if getattr(args, "scale_b", None) is not None else unit
    r16 = lambda x: -(-x // 16) * 16
    note = ""
    if (r16(k), r16(n)) != (k, n):
        a, b = padded_to(a, m, r16(k), "r"), padded_to(b, r16(k), r16(n), "c")
        note = f"torch._scaled_mm on operands zero-padded to K={r16(k)}, N={r16(n)} (padding not timed)"

    def call() -> Any:
        out = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                               use_fast_accum=fast_accum)
        return out[:, :n]

    return call, note


# -- one shape -------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Context:
    device: Any
    timer: CudaTimer | CpuTimer
    protocol: Protocol
    full_matrix: bool = False
    screen: bool = True
    fast_accum: bool = False
    seed: int = 1


def _label(selection: Any) -> str:
    return selection.kernel.name + (" (padded)" if selection.padded else "")


def _runner(selection: Any, args: Any, first: Any) -> Callable[[], Any]:
    """The timed call: into `first` (the plan's validated result) as its out, but a padded plan without an out,
    as td.gemm runs it (the result is then a view of the launch's padded output; a caller's exact out would
    add a copy back that only such a call asks for)."""
    from tiledispatch.runtime.execute import run_selection

    timed = dataclasses.replace(args, out=None if selection.padded else first)
    return lambda: run_selection(selection, timed)


def time_plans(ctx: Context, plans: list, args: Any, ref: Any, tol: float, protect: set[str]
               ) -> tuple[dict[str, Timing], dict[str, Any]]:
    """Validate then time each plan (in the given order). Returns timings and wrong plans (error or message)."""
    from tiledispatch.runtime.execute import run_selection
    from tiledispatch.select.selector import Selection

    timings: dict[str, Timing] = {}
    wrong: dict[str, Any] = {}
    best = math.inf
    for plan in plans:
        selection = Selection(plan.kernel, "bench", plan.problem, plan.padded)
        try:
            out = run_selection(selection, dataclasses.replace(args, out=None))
            err = rel_err(out, ref)
        except Exception as exc:  # noqa: BLE001 - a failing plan is a result, not the end of the run
            wrong[plan.label] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if err > tol:
            wrong[plan.label] = err
            continue
        screen = best if (ctx.screen and plan.label not in protect and math.isfinite(best)) else None
        timings[plan.label] = ctx.timer.time_ms(_runner(selection, args, out), screen)
        best = min(best, timings[plan.label].ms)
    return timings, wrong


def _ours(prefix: str, label: str | None, timings: dict[str, Timing], cublas_ms: float, flops: int) -> dict:
    timing = timings.get(label) if label else None
    if timing is None:
        return {f"{prefix}_kernel": label, f"{prefix}_ms": None, f"{prefix}_tflops": None, f"{prefix}_ratio": None}
    return {f"{prefix}_kernel": label, f"{prefix}_ms": timing.ms, f"{prefix}_tflops": flops / timing.ms / 1e9,
            f"{prefix}_ratio": cublas_ms / timing.ms}


def paired_finals(ctx: Context, vendor: Callable[[], Any], plans: list, labels: list[str], args: Any
                  ) -> dict[str, Timing]:
    """cuBLAS and the plans of `labels` (already validated) timed together in PAIRED_ROUNDS alternating rounds."""
    from tiledispatch.runtime.execute import run_selection
    from tiledispatch.select.selector import Selection

    by_label = {plan.label: plan for plan in plans}
    fns: dict[str, Callable[[], Any]] = {VENDOR: vendor}
    for label in labels:
        plan = by_label[label]
        selection = Selection(plan.kernel, "bench", plan.problem, plan.padded)
        out = run_selection(selection, dataclasses.replace(args, out=None))
        fns[label] = _runner(selection, args, out)
    return ctx.timer.paired_ms(fns, PAIRED_ROUNDS)


def _vendor_fields(timing: Timing, flops: int) -> dict[str, float]:
    return {"cublas_ms": timing.ms, "cublas_p20_ms": timing.p20_ms, "cublas_p80_ms": timing.p80_ms,
            "cublas_tflops": flops / timing.ms / 1e9}


def run_shape(ctx: Context, reg: Any, combo: Combo, shape: Any) -> dict[str, Any]:
    """One row: cuBLAS, every plan (validated, then timed), tune / auto / rules picks (re-timed with cuBLAS)."""
    from tiledispatch.testing.inputs import make_args

    problem = combo.problem(shape.m, shape.n, shape.k)
    args = make_args(problem, ctx.device, seed=ctx.seed)
    ref = reference(args)
    vendor, note = vendor_call(problem, args, ctx.fast_accum)
    row: dict[str, Any] = {"combo": combo.key, "dtype": combo.dtype, "layout": combo.layout, "m": shape.m,
                           "n": shape.n, "k": shape.k, "shape": shape.key, "why": shape.why, "flops": problem.flops,
                           "cublas_rel_err": rel_err(vendor(), ref)}
    row.update(_vendor_fields(ctx.timer.time_ms(vendor), problem.flops))
    if note:
        row["cublas_note"] = note
    if not reg.plans(problem):
        row.update(plans=0, timed=0, screened=0, wrong={}, error="no kernel of the registry supports it")
        return row
    auto, rules = reg.select(problem, "auto"), reg.select(problem, "rules")
    order = {label: i for i, (label, _) in enumerate(rules.ranking)}
    plans = sorted(reg.plans(problem), key=lambda plan: order.get(plan.label, len(order)))
    protect = {_label(auto), _label(rules)}
    timings, wrong = time_plans(ctx, plans, args, ref, TOLERANCE[combo.dtype], protect)
    best = min(timings, key=lambda label: timings[label].ms) if timings else None
    finals = [label for label in dict.fromkeys([best, _label(auto), _label(rules)]) if label in timings]
    final = dict(timings)
    if finals:
        paired = paired_finals(ctx, vendor, plans, finals, args)
        row.update(cublas_pass_ms=row["cublas_ms"], tune_pass_ms=timings[best].ms)
        row.update(_vendor_fields(paired[VENDOR], problem.flops))
        final.update((label, paired[label]) for label in finals)
    cublas_ms = row["cublas_ms"]
    row.update(_ours("tune", best, final, cublas_ms, problem.flops))
    row.update(_ours("auto", _label(auto), final, cublas_ms, problem.flops), auto_strategy=auto.strategy)
    if _label(rules) != _label(auto):
        row.update(_ours("rules", _label(rules), final, cublas_ms, problem.flops))
    row.update(plans=len(plans), timed=len(timings), screened=sum(t.screened for t in timings.values()),
               wrong=wrong)
    if ctx.full_matrix:
        row["timings"] = {label: t.to_dict() for label, t in timings.items()}
    return row


# -- the run ---------------------------------------------------------------------------------------------------
def build_registry(combo: Combo, kind: str, tuning_db: str, arch: Any) -> tuple[Any, dict[str, Any]]:
    """The built registry of the combo's preset (None when the preset cannot be loaded) and its build report."""
    import tiledispatch as td

    name = combo.preset(kind)
    reg = td.Registry(arch, tuning_db=tuning_db)
    try:
        reg.add_preset(name)
    except td.TileDispatchError as exc:
        return None, {"preset": name, "error": str(exc)}
    report = reg.build()
    return reg, {"preset": name, "kernels": len(reg), "built": len(report.built), "cached": len(report.cached),
                 "failed": report.failed, "skipped": dict(reg.skipped), "seconds": round(report.seconds, 2)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    summary = {}
    for key in dict.fromkeys(r["combo"] for r in rows):
        sub = [r for r in rows if r["combo"] == key]
        tuned = [r for r in sub if r.get("tune_ratio")]
        worst = min(tuned, key=lambda r: r["tune_ratio"]) if tuned else None
        big = [r for r in tuned if min(r["m"], r["n"], r["k"]) >= COMPUTE_BOUND_MIN]
        summary[key] = {
            "shapes": len(sub), "tune_geomean": geomean([r["tune_ratio"] for r in sub if "tune_ratio" in r]),
            "auto_geomean": geomean([r["auto_ratio"] for r in sub if "auto_ratio" in r]),
            "auto_vs_tune_geomean": geomean([r["tune_ms"] / r["auto_ms"] for r in tuned if r.get("auto_ms")]),
            "tune_min": worst["tune_ratio"] if worst else None, "tune_min_shape": worst["shape"] if worst else None,
            "compute_bound_tune_geomean": geomean([r["tune_tflops"] / r["cublas_tflops"] for r in big]),
            "compute_bound_shapes": len(big), "shapes_without_valid_plan": sum(1 for r in sub if not r.get("tune_ms")),
            "auto_not_timed": sum(1 for r in sub if not r.get("auto_ms")),
            "wrong_plans": sum(len(r.get("wrong", {})) for r in sub)}
    return summary


def measure_limits(timer: CudaTimer) -> dict[str, float]:
    """cuBLAS bf16 8192^3 TF/s and HBM copy GB/s (2 GiB device-to-device), with the benchmark's timer."""
    import torch

    a = torch.randn(8192, 8192, device=timer.device, dtype=torch.bfloat16)
    gemm = timer.time_ms(lambda: torch.mm(a, a, out=torch.empty_like(a)))
    return {"cublas_bf16_8192_tflops": 2 * 8192**3 / gemm.ms / 1e9, "hbm_copy_gbps": hbm_copy_gbps(timer)}


def header(ctx: Context, opts: argparse.Namespace) -> dict[str, Any]:
    return {"benchmark": "gemm", "mode": "smoke" if opts.smoke else "gpu", **environment(ctx.device),
            "protocol": ctx.protocol.describe(ctx.device.type == "cuda") + (
                f"; cuBLAS and the tune / auto / rules picks then timed together in {PAIRED_ROUNDS} alternating "
                "rounds (the reported times; first pass: `cublas_pass_ms`, `tune_pass_ms`, `timings`); padded "
                "plans timed without an out (operand copies included, result a view of the padded output)"
                if ctx.device.type == "cuda" else ""),
            "preset_kind": opts.preset_kind, "full_matrix": opts.full_matrix, "screening": ctx.screen,
            "fp8_fast_accum": ctx.fast_accum, "tolerances": TOLERANCE, "argv": sys.argv[1:]}


def progress_line(i: int, total: int, row: dict[str, Any], elapsed: float) -> str:
    us = lambda ms: f"{ms * 1e3:9.1f} us" if ms else "        - us"
    ratio = lambda r: f"{r:5.2f}x" if r else "    -"
    return (f"[{i:>3}/{total}] {elapsed:6.0f}s {row['combo']:<12} {row['shape']:>17} {row['why']:<24} cuBLAS "
            f"{us(row['cublas_ms'])} | tune {us(row.get('tune_ms'))} {ratio(row.get('tune_ratio'))} | auto "
            f"{us(row.get('auto_ms'))} {ratio(row.get('auto_ratio'))} | {row['timed']}/{row['plans']} timed, "
            f"{len(row['wrong'])} wrong | {row.get('tune_kernel')}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="bf16,fp16,fp8e4m3", help="comma list of bf16, fp16, fp8e4m3")
    parser.add_argument("--layouts", default="rcr,rrr", help="comma list of rcr, rrr (fp8 runs rcr only)")
    parser.add_argument("--shapes", help="small | all | comma list of MxNxK (default: all; smoke: 2 tiny shapes)")
    parser.add_argument("--preset-kind", default="essential", help="registry preset gemm_{dtype}_{layout}_{kind}")
    parser.add_argument("--out", help="JSON path (default benchmarks/results/gemm_<gpu-slug>.json)")
    parser.add_argument("--full-matrix", action="store_true", help="store every plan's timing (preset derivation)")
    parser.add_argument("--no-screen", action="store_true", help="full sample count for every plan")
    parser.add_argument("--fp8-fast-accum", action="store_true", help="cuBLAS fp8 with use_fast_accum=True")
    parser.add_argument("--tuning-db", help="tuning DB for `auto` (default: a private empty one)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true",
                        help="CPU check of the script: Triton interpreter, 2 tiny fp16 shapes, wall-clock timing")
    return parser.parse_args(argv)


def suite_module() -> Any:
    """benchmarks/gemm_suite.py (importable however this script was started)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import gemm_suite

    return gemm_suite


def plan_run(opts: argparse.Namespace) -> tuple[Context, list[Combo], list[Any]]:
    """Device, timer, combos and shapes of this run (the smoke run: CPU, fp16, two tiny shapes by default)."""
    import torch

    gemm_suite = suite_module()
    try:
        shapes = (gemm_suite.smoke_suite() if opts.smoke and opts.shapes is None
                  else gemm_suite.parse_shapes(opts.shapes or "all"))
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    layouts = opts.layouts.split(",")
    if opts.smoke:
        ctx = Context(torch.device("cpu"), CpuTimer(), Protocol(), opts.full_matrix, screen=False, seed=opts.seed)
        return ctx, select_combos(["fp16"], layouts), shapes
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible: run on a GPU machine, or use --smoke for the CPU interpreter check")
    device = torch.device("cuda", torch.cuda.current_device())
    torch.backends.cuda.matmul.allow_tf32 = False   # the fp32 reference is a true fp32 product
    protocol = Protocol()
    ctx = Context(device, CudaTimer(protocol, device), protocol, opts.full_matrix, not opts.no_screen,
                  opts.fp8_fast_accum, opts.seed)
    return ctx, select_combos(opts.dtypes.split(","), layouts), shapes


def default_out(result: dict[str, Any]) -> Path:
    if result["mode"] == "smoke":
        return Path(tempfile.gettempdir()) / "gemm_smoke.json"
    return ROOT / "benchmarks" / "results" / f"gemm_{gpu_slug(result['gpu'])}.json"


def write_result(result: dict[str, Any], rows: list[dict[str, Any]], out: Path, start: float) -> None:
    """Write the JSON (also after each combo, so an interrupted run keeps what it measured)."""
    import json

    result.update(seconds=round(time.perf_counter() - start, 1), summary=summarize(rows), rows=rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


def print_summary(summary: dict[str, dict[str, Any]]) -> None:
    fmt = lambda v: f"{v:.3f}x" if v else "-"
    for key, s in summary.items():
        print(f"{key}: tune geomean {fmt(s['tune_geomean'])}, auto geomean {fmt(s['auto_geomean'])}, worst tune "
              f"{fmt(s['tune_min'])} ({s['tune_min_shape']}), compute-bound tune "
              f"{fmt(s['compute_bound_tune_geomean'])}, {s['wrong_plans']} wrong plans")


def main(argv: list[str] | None = None) -> int:
    import tiledispatch as td

    opts = parse_args(argv)
    ctx, combos, shapes = plan_run(opts)
    result = header(ctx, opts)
    out = Path(opts.out) if opts.out else default_out(result)
    start = time.perf_counter()
    result["limits"] = measure_limits(ctx.timer) if isinstance(ctx.timer, CudaTimer) else {}
    arch = td.detect()
    result.update(arch=arch.name, builds={})
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tuning_db = opts.tuning_db or str(Path(tmp) / "tuning.json")
        for combo in combos:
            reg, result["builds"][combo.key] = build_registry(combo, opts.preset_kind, tuning_db, arch)
            print(f"{combo.key}: {result['builds'][combo.key]}"[:400], flush=True)
            if reg is None:
                continue
            for shape in shapes:
                rows.append(run_shape(ctx, reg, combo, shape))
                print(progress_line(len(rows), len(combos) * len(shapes), rows[-1], time.perf_counter() - start),
                      flush=True)
            write_result(result, rows, out, start)
    write_result(result, rows, out, start)
    print_summary(result["summary"])
    print(f"wrote {out} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
