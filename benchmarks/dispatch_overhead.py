"""Dispatch overhead: the host-side cost per call of td.gemm, Registry.run and Kernel.run against a direct launch
of the same compiled kernel (CompiledKernel.run with every argument prebuilt), torch.mm and a CUDA-graph replay.

Protocol: per variant, `--calls` calls in a loop then torch.cuda.synchronize(); wall time / calls; median of
`--trials` trials after one warm-up trial (`per_call_us`). `issue_us` times the loop alone (after a sync, without
the final sync, `--issue-calls` calls: fewer than the launch queue holds). overhead = variant - direct, from
per_call_us; the issue requirement is met when every overhead on the tiny problem is at most 5 us. Outputs are
checked against torch in fp32 before timing. The registry is built from the preset gemm_bf16_rcr_essential;
Kernel.run and Registry.run (strategy `rules`) run the rules pick, td.gemm its own default registry (`auto`).

Usage (GPU):  python benchmarks/dispatch_overhead.py [--calls 2000] [--trials 7]
                  [--out benchmarks/results/dispatch_overhead_<gpu-slug>.json]
Usage (CPU):  python benchmarks/dispatch_overhead.py --smoke     (CPU tensors through the compiled-kernel code path
              with no-op compiled kernels and a stand-in CUDA runtime: Python-side overhead only; writes to /tmp)
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRESET = "gemm_bf16_rcr_essential"
PROBLEMS = ((64, 64, 64), (1, 4096, 4096))
LIMIT_US = 5.0
GRAPH_CALLS = 100   # Kernel.run calls captured in one CUDA graph
VARIANTS = ("direct", "kernel_run", "kernel_run_alloc", "registry_run", "td_gemm", "torch_mm")
DISPATCH = ("kernel_run", "registry_run", "td_gemm")   # compared with `direct`


# -- timing -----------------------------------------------------------------------------------------------------
def per_call_us(fn: Callable[[], Any], calls: int, trials: int, sync: Callable[[], None]) -> float:
    """Median over trials of (wall time of `calls` calls + one sync) / calls, after a warm-up trial."""
    samples = []
    for trial in range(trials + 1):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        if trial:
            samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def issue_us(fn: Callable[[], Any], calls: int, trials: int, sync: Callable[[], None]) -> float:
    """Median over trials of the loop alone (started after a sync, not waiting for the GPU) / calls."""
    samples = []
    for _ in range(trials):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    sync()
    return statistics.median(samples)


def graph_replay_us(fn: Callable[[], Any], calls: int, trials: int) -> float:
    """Per call cost of fn captured GRAPH_CALLS times in one CUDA graph and replayed calls / GRAPH_CALLS times."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            fn()
    replays = max(1, calls // GRAPH_CALLS)
    return per_call_us(lambda: [graph.replay() for _ in range(replays)], 1, trials, torch.cuda.synchronize) / (
        replays * GRAPH_CALLS)


# -- the variants -----------------------------------------------------------------------------------------------
def direct_launch(kernel: Any, a: Any, b: Any, out: Any, stream: int) -> Callable[[], Any]:
    """CompiledKernel.run of every entry of `kernel` with all arguments prebuilt (workspaces and counters allocated
    once, host tensor descriptors made once: Triton's launcher still encodes their tensor maps at each call)."""
    import torch

    from tiledispatch.runtime import descriptors
    from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
    from tiledispatch.runtime.launcher import _described, ensure_scratch_allocator

    args = GemmArgs(a, b, out)
    ensure_scratch_allocator()   # tma_ws kernels create descriptors in global scratch (as Kernel.run does)
    bound = kernel.bound_launch(args, problem_from_args(args, prefer_layout=kernel.config.layout))
    dyn = (a, b, out, None, None, 1.0, 0.0, None, None)
    dyn += tuple((torch.zeros if zeroed else torch.empty)(n, dtype=dtype, device=a.device)
                 for n, dtype, zeroed in bound.workspaces)   # counters zeroed, as the kernels leave them
    launches = [(e.run, e.gx, e.gy, e.gz, e.function, e.packed,
                 _described(e.pick(dyn + e.consts), e.descs, descriptors.HostDescriptor)) for e in bound.entries]
    if len(launches) == 1:
        run, gx, gy, gz, function, packed, prebuilt = launches[0]
        return lambda: run(gx, gy, gz, stream, function, packed, None, None, None, *prebuilt)

    def launch_all() -> None:
        for run, gx, gy, gz, function, packed, prebuilt in launches:
            run(gx, gy, gz, stream, function, packed, None, None, None, *prebuilt)

    return launch_all


def variants(registry: Any, kernel: Any, a: Any, b: Any, out: Any, stream: int) -> dict[str, Callable[[], Any]]:
    import torch

    import tiledispatch as td

    return {"direct": direct_launch(kernel, a, b, out, stream),
            "kernel_run": lambda: kernel.run(a, b, out=out),
            "kernel_run_alloc": lambda: kernel.run(a, b),
            "registry_run": lambda: registry.run(None, a, b, out=out, strategy="rules"),
            "td_gemm": lambda: td.gemm(a, b, out=out),
            "torch_mm": lambda: torch.mm(a, b, out=out)}


def rel_err(out: Any, a: Any, b: Any) -> float:
    ref = a.float() @ b.float()
    return float((out.float() - ref).norm() / ref.norm())


def check_outputs(fns: dict[str, Callable[[], Any]], a: Any, b: Any, out: Any) -> dict[str, float]:
    """Relative error vs torch in fp32 of every variant's output (each variant first poisons out with NaN)."""
    errors = {}
    for name, fn in fns.items():
        out.fill_(float("nan"))
        result = fn()
        errors[name] = rel_err(out if result is None else result, a, b)
    return errors


def pick_kernel(registry: Any, problem: Any) -> Any:
    """The rules pick among the kernels that run `problem` directly (a direct launch needs unpadded operands)."""
    from tiledispatch.select import selector

    plans = [plan for plan in registry.plans(problem) if not plan.padded]
    return selector.by_rules(registry, plans, problem)[0][0].kernel


def measure_problem(registry: Any, shape: tuple[int, int, int], opts: argparse.Namespace, env: Any) -> dict:
    import torch

    import tiledispatch as td
    from tiledispatch import api

    m, n, k = shape
    problem = td.GemmProblem(m, n, k, dtype="bf16", layout="rcr")
    kernel = pick_kernel(registry, problem)
    a = torch.randn(m, k, device=env.device, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=env.device, dtype=torch.bfloat16).t()
    out = torch.empty(m, n, device=env.device, dtype=torch.bfloat16)
    fns = variants(registry, kernel, a, b, out, env.stream())
    if opts.smoke:
        del fns["torch_mm"]   # a real CPU matmul: not comparable with no-op kernels
    row: dict[str, Any] = {"m": m, "n": n, "k": k, "dtype": "bf16", "layout": "rcr", "kernel": kernel.name,
                           "registry_kernel": registry.select(problem, "rules").kernel.name,
                           "td_gemm_kernel": api.default_registry(problem).select(problem, "auto").kernel.name}
    row["rel_err"] = check_outputs(fns, a, b, out) if not opts.smoke else {}
    row["valid"] = all(err < 2e-2 for err in row["rel_err"].values())
    row["per_call_us"] = {name: per_call_us(fn, opts.calls, opts.trials, env.sync) for name, fn in fns.items()}
    row["issue_us"] = {name: issue_us(fn, opts.issue_calls, opts.trials, env.sync) for name, fn in fns.items()}
    if not opts.smoke:
        row["per_call_us"]["graph_replay"] = graph_replay_us(fns["kernel_run"], opts.calls, opts.trials)
    row["overhead_us"] = {v: row["per_call_us"][v] - row["per_call_us"]["direct"] for v in DISPATCH}
    row["issue_overhead_us"] = {v: row["issue_us"][v] - row["issue_us"]["direct"] for v in DISPATCH}
    row["pass"] = row["valid"] and max(row["overhead_us"].values()) <= LIMIT_US
    row["issue_pass"] = max(row["issue_overhead_us"].values()) <= LIMIT_US   # host time alone
    return row


# -- environment ------------------------------------------------------------------------------------------------
def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100_80gb_hbm3'."""
    name = re.sub(r"^nvidia\s+", "", name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_") or "gpu"


def host_cpu() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def header(opts: argparse.Namespace) -> dict[str, Any]:
    import torch
    import triton

    import tiledispatch as td

    return {"benchmark": "dispatch_overhead", "mode": "smoke" if opts.smoke else "gpu",
            "gpu": "cpu (no-op compiled kernels)" if opts.smoke else torch.cuda.get_device_name(),
            "host_cpu": host_cpu(), "tiledispatch": td.__version__, "triton": triton.__version__,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "preset": PRESET, "limit_us": LIMIT_US,
            "calls": opts.calls, "issue_calls": opts.issue_calls, "trials": opts.trials,
            "graph_calls": GRAPH_CALLS,
            "protocol": __doc__.split("\n\n")[1].replace("\n", " ").removeprefix("Protocol: "),
            "argv": sys.argv[1:]}


def smoke_environment() -> SimpleNamespace:
    """CPU tensors through the compiled-kernel code path: no-op compiled kernels, a stand-in CUDA runtime."""
    import torch

    from tiledispatch.registry import kernel as kernel_mod
    from tiledispatch.runtime import launcher

    runtime = SimpleNamespace(get_device=lambda: 0, raw_stream=lambda index: 0, is_initialized=lambda: True,
                              device=lambda index: contextlib.nullcontext(), is_capturing=lambda: False)
    noop = SimpleNamespace(run=lambda *args: None, function=0, packed_metadata=(),
                           metadata=SimpleNamespace(global_scratch_size=0))
    launcher._RUNTIME = runtime
    launcher._SM_COUNTS[0] = 132
    launcher.uses_interpreter = kernel_mod.uses_interpreter = lambda device: False
    kernel_mod._check_device_arch = lambda device, arch: None
    launcher.EntryLauncher._compiled_kernel = lambda self, index: noop
    return SimpleNamespace(device=torch.device("cpu"), sync=lambda: None, stream=lambda: 0)


def gpu_environment() -> SimpleNamespace:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible: run on a GPU machine, or use --smoke")
    return SimpleNamespace(device=torch.device("cuda"), sync=torch.cuda.synchronize,
                           stream=lambda: torch.cuda.current_stream().cuda_stream)


def build_registry(opts: argparse.Namespace) -> tuple[Any, str]:
    """The preset's registry (smoke: its first --smoke-kernels configs, also used as td.gemm's default)."""
    import tiledispatch as td
    from tiledispatch import api
    from tiledispatch.presets import load_preset

    registry = td.Registry("sm_90" if opts.smoke else td.detect())
    if opts.smoke:
        for cfg in load_preset(PRESET)[: opts.smoke_kernels]:
            registry.add(cfg)
        api._DEFAULTS[("bf16", "rcr", td.Epilogue())] = registry
    else:
        registry.add_preset(PRESET)
    report = registry.build()
    return registry, str(report)


# -- main -------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, help="calls per timed loop (default 2000; smoke 500)")
    parser.add_argument("--issue-calls", type=int, default=200, help="calls per issue-only loop")
    parser.add_argument("--trials", type=int, help="timed trials per variant, median reported (default 7; smoke 3)")
    parser.add_argument("--out", help="JSON path (default benchmarks/results/dispatch_overhead_<gpu-slug>.json)")
    parser.add_argument("--smoke", action="store_true", help="no GPU: check the control flow on CPU")
    parser.add_argument("--smoke-kernels", type=int, default=2, help="preset configs built in a smoke run")
    opts = parser.parse_args(argv)
    opts.calls = opts.calls or (500 if opts.smoke else 2000)
    opts.trials = opts.trials or (3 if opts.smoke else 7)
    return opts


def default_out(result: dict[str, Any]) -> Path:
    if result["mode"] == "smoke":
        return Path(tempfile.gettempdir()) / "dispatch_overhead_smoke.json"
    return ROOT / "benchmarks" / "results" / f"dispatch_overhead_{gpu_slug(result['gpu'])}.json"


def print_row(row: dict[str, Any]) -> None:
    cells = " | ".join(f"{name} {us:.2f}" for name, us in row["per_call_us"].items())
    over = ", ".join(f"{name} {us:+.2f}" for name, us in row["overhead_us"].items())
    issue = ", ".join(f"{name} {us:+.2f}" for name, us in row["issue_overhead_us"].items())
    print(f"{row['m']}x{row['n']}x{row['k']} {row['kernel']}: {cells} us/call | overhead vs direct: {over} us "
          f"(issue only: {issue}) -> {'PASS' if row['pass'] else 'FAIL'} (limit {LIMIT_US:g} us)", flush=True)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    env = smoke_environment() if opts.smoke else gpu_environment()
    result = header(opts)
    out = Path(opts.out) if opts.out else default_out(result)
    registry, result["build"] = build_registry(opts)
    print(f"{PRESET}: {result['build']}", flush=True)
    result["rows"] = []
    for shape in PROBLEMS:
        result["rows"].append(measure_problem(registry, shape, opts, env))
        print_row(result["rows"][-1])
    result["pass"] = all(row["pass"] for row in result["rows"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"{'PASS' if result['pass'] else 'FAIL'}; wrote {out}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":   # Registry.build spawns workers, which re-import this file
    sys.exit(main())
