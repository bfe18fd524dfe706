"""Dispatch overhead: host time per call of td.gemm, Registry.run, Kernel.run and td.conv* against a direct
launch of the same compiled kernel and torch's own call. Only the direct launch goes past the public API, so
one script measures the code before and after a redesign (tools/overhead_ab.py runs it on both, compares).

Protocol: per variant, `--calls` calls in a loop then torch.cuda.synchronize(); wall time / calls; median of
`--trials` trials after one warm-up trial (`per_call_us`). `issue_us` times the loop alone (after a sync,
without the final sync, `--issue-calls` calls: fewer than the launch queue holds): the host time per call.
GEMM overhead = variant - direct; the limit is met when every overhead is at most 5 us. Outputs are checked
against torch in fp32 before timing. Kernel.run / Registry.run run the rules pick of gemm_bf16_rcr_essential.

Usage (GPU):  python benchmarks/dispatch_overhead.py [--label before] [--calls 2000] [--trials 7] [--out PATH]
Usage (CPU):  python benchmarks/dispatch_overhead.py --smoke   (Triton's interpreter, its launches skipped,
              presets cut to --smoke-kernels configs: the control flow only, its times are the interpreter's)
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import math
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRESET = "gemm_bf16_rcr_essential"
CONV_PRESET = "conv_{}_bf16_2d_essential"
PROBLEMS = ((64, 64, 64), (1, 4096, 4096))
# (direction, N, C, K, input H x W, filter R x S, padding): bf16 channels-last, stride 1, dilation 1, 1 group
CONV_PROBLEMS = (("fwd", 32, 64, 64, (56, 56), (3, 3), 1), ("fwd", 1, 64, 64, (14, 14), (3, 3), 1),
                 ("bwd_data", 32, 64, 64, (56, 56), (3, 3), 1), ("bwd_data", 1, 64, 64, (14, 14), (3, 3), 1),
                 ("bwd_weight", 32, 64, 64, (56, 56), (3, 3), 1),
                 ("bwd_weight", 1, 64, 64, (14, 14), (3, 3), 1))
LIMIT_US = 5.0
TOLERANCE = 2e-2      # relative error vs torch in fp32 (bf16 outputs)
GRAPH_CALLS = 100     # Kernel.run calls captured in one CUDA graph
VARIANTS = ("direct", "kernel_run", "kernel_run_alloc", "registry_run", "td_gemm", "torch_mm")
DISPATCH = ("kernel_run", "registry_run", "td_gemm")   # compared with `direct`
CONV_VARIANTS = ("td_api", "torch")   # td.conv / conv_bwd_data / conv_bwd_weight, and torch's cuDNN call
JUDGED = {"gemm": "td_gemm", "conv": "td_api"}   # the variants a before/after comparison judges (must run)
WRITTEN = {"fwd": "y", "bwd_data": "x", "bwd_weight": "w"}   # the tensor each conv direction writes
API_CHANGE = (ImportError, AttributeError, TypeError)   # raised by a renamed internal or a changed signature


# -- timing --------------------------------------------------------------------------------------------------
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
    """Per call cost of fn captured GRAPH_CALLS times in a CUDA graph, replayed calls / GRAPH_CALLS times."""
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

    def replay() -> None:
        for _ in range(replays):
            graph.replay()

    return per_call_us(replay, 1, trials, torch.cuda.synchronize) / (replays * GRAPH_CALLS)


def timings(fns: dict[str, Callable[[], Any]], opts: argparse.Namespace, env: Any) -> dict[str, Any]:
    return {"per_call_us": {name: per_call_us(fn, opts.calls, opts.trials, env.sync)
                            for name, fn in fns.items()},
            "issue_us": {name: issue_us(fn, opts.issue_calls, opts.trials, env.sync)
                         for name, fn in fns.items()}}


# -- variants that may be missing ----------------------------------------------------------------------------
def optional(make: Callable[[], Any]) -> tuple[Any, str | None]:
    """(make(), None), or (None, the reason) where make raises what a renamed internal or a changed signature
    raises: a variant that is not judged is then left out of the row (and named in it), not the whole run."""
    try:
        return make(), None
    except API_CHANGE as exc:
        return None, f"{type(exc).__name__}: {exc}"


def first_calls(fns: dict[str, Callable[[], Any]], written: Any, reference: Any, judged: str
                ) -> tuple[dict[str, float], dict[str, str]]:
    """Call every variant once (before timing): the relative error of its output against `reference` (None:
    not checked) after `written` was poisoned with NaN, and the variants left out (removed from fns) with the
    reason. The judged variant must run: its errors propagate."""
    errors, missing = {}, {}
    for name, fn in list(fns.items()):
        if reference is not None:
            written.fill_(float("nan"))
        result, why = (fn(), None) if name == judged else optional(fn)
        if why is not None:
            missing[name] = why
            del fns[name]
            print(f"  {name} left out: {why}", flush=True)
        elif reference is not None:
            errors[name] = rel_err(written if result is None else result, reference)
    return errors, missing


def rel_err(out: Any, ref: Any) -> float:
    err = float((out.float() - ref).norm() / ref.norm())
    return err if math.isfinite(err) else math.inf   # NaN (an unwritten element) counts as wrong


# -- GEMM ----------------------------------------------------------------------------------------------------
def direct_launch(kernel: Any, a: Any, b: Any, out: Any, stream: int) -> Callable[[], Any]:
    """The floor the GEMM overheads are taken from: every entry of `kernel` launched with all arguments
    prebuilt (CompiledKernel.run through Triton's launcher; on the smoke path the interpreted function). The
    one part of this script that reaches into tiledispatch internals: where they changed, `optional` leaves it
    out."""
    import torch

    from tiledispatch.runtime import descriptors
    from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
    from tiledispatch.runtime.launcher import _described, ensure_scratch_allocator

    args = GemmArgs(a, b, out)
    if a.is_cuda:
        ensure_scratch_allocator()   # tma_ws kernels create descriptors in global scratch (as Kernel.run)
    bound = kernel.bound_launch(args, problem_from_args(args, prefer_layout=kernel.config.layout))
    dyn = (a, b, out, None, None, 1.0, 0.0, None, None)
    dyn += tuple((torch.zeros if zeroed else torch.empty)(n, dtype=dtype, device=a.device)
                 for n, dtype, zeroed in bound.workspaces)   # counters zeroed, as the kernels leave them
    launches = []
    for e in bound.entries:
        if hasattr(e, "jit"):   # Triton's interpreter
            launch = e.jit[e.grid]
            launches.append((launch, _described(e.pick(dyn + e.consts), e.descs, descriptors.checked)))
        else:
            run, head = e.run, (e.gx, e.gy, e.gz, stream, e.function, e.packed, None, None, None)
            prebuilt = _described(e.pick(dyn + e.consts), e.descs, descriptors.HostDescriptor)
            launches.append((run, head + tuple(prebuilt)))
    if len(launches) == 1:
        run, arguments = launches[0]
        return lambda: run(*arguments)

    def launch_all() -> None:
        for run, arguments in launches:
            run(*arguments)

    return launch_all


def pick_kernel(registry: Any, problem: Any) -> Any:
    """The registry's rules pick, or where it runs on padded operands the first built kernel that runs
    `problem` directly (a direct launch needs unpadded operands); looked up by name as a user would."""
    chosen = registry.select(problem, "rules").kernel
    if not chosen.is_supported(problem):
        chosen = next(k for k in registry.kernels if k.built and k.is_supported(problem))
    return registry.get(chosen.name)


def gemm_variants(registry: Any, kernel: Any, a: Any, b: Any, out: Any) -> dict[str, Callable[[], Any]]:
    import torch

    import tiledispatch as td

    return {"kernel_run": lambda: kernel.run(a, b, out=out),
            "kernel_run_alloc": lambda: kernel.run(a, b),
            "registry_run": lambda: registry.run(None, a, b, out=out, strategy="rules"),
            "td_gemm": lambda: td.gemm(a, b, out=out),
            "torch_mm": lambda: torch.mm(a, b, out=out)}


def measure_gemm(registry: Any, shape: tuple[int, int, int], opts: argparse.Namespace, env: Any) -> dict:
    import torch

    import tiledispatch as td

    m, n, k = shape
    problem = td.GemmProblem(m, n, k, dtype="bf16", layout="rcr")
    kernel = pick_kernel(registry, problem)
    torch.manual_seed(0)
    a = torch.randn(m, k, device=env.device, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=env.device, dtype=torch.bfloat16).t()
    out = torch.empty(m, n, device=env.device, dtype=torch.bfloat16)
    direct, why = optional(lambda: direct_launch(kernel, a, b, out, env.stream()))
    fns = {"direct": direct} if direct is not None else {}
    fns.update(gemm_variants(registry, kernel, a, b, out))
    if opts.smoke:
        del fns["torch_mm"]   # a real CPU matmul: not comparable with skipped launches
    reference = None if opts.smoke else a.float() @ b.float()
    row: dict[str, Any] = {"id": f"gemm {m}x{n}x{k}", "m": m, "n": n, "k": k, "dtype": "bf16",
                           "layout": "rcr", "kernel": kernel.name,
                           "registry_kernel": registry.select(problem, "rules").kernel.name,
                           "td_gemm_kernel": registry.select(problem, "auto").kernel.name}   # td.gemm's
    row["rel_err"], row["unavailable"] = first_calls(fns, out, reference, JUDGED["gemm"])
    if why is not None:
        row["unavailable"]["direct"] = why
        print(f"  direct left out: {why}", flush=True)
    row["valid"] = all(err < TOLERANCE for err in row["rel_err"].values())
    row.update(timings(fns, opts, env))
    if not opts.smoke and "kernel_run" in fns:
        row["per_call_us"]["graph_replay"] = graph_replay_us(fns["kernel_run"], opts.calls, opts.trials)
    row.update(overheads(row))
    return row


def overheads(row: dict[str, Any]) -> dict[str, Any]:
    """Each dispatch variant minus `direct` (per call and issue only) and whether they are within LIMIT_US
    (None: no direct launch to compare with)."""
    us, issue = row["per_call_us"], row["issue_us"]
    if "direct" not in us:
        return {"overhead_us": {}, "issue_overhead_us": {}, "pass": None, "issue_pass": None}
    over = {v: us[v] - us["direct"] for v in DISPATCH if v in us}
    issue_over = {v: issue[v] - issue["direct"] for v in DISPATCH if v in issue}
    return {"overhead_us": over, "issue_overhead_us": issue_over,
            "pass": row["valid"] and max(over.values(), default=0.0) <= LIMIT_US,
            "issue_pass": max(issue_over.values(), default=0.0) <= LIMIT_US}   # host time alone


# -- convolutions --------------------------------------------------------------------------------------------
def conv_id(case: tuple) -> str:
    direction, n, c, k, spatial, filt, pad = case
    return f"conv {direction} {n}x{c}x{'x'.join(map(str, spatial))} k{k} {'x'.join(map(str, filt))} pad{pad}"


def conv_tensors(case: tuple, device: Any) -> SimpleNamespace:
    """x (N, C, H, W), w (K, C, R, S) and y (N, K, P, Q) in bf16 channels-last: y is the forward output and
    the backward directions' gradient input; each direction writes one of them (WRITTEN)."""
    import torch

    _, n, c, k, spatial, filt, pad = case
    out_spatial = tuple(size + 2 * pad - f + 1 for size, f in zip(spatial, filt))

    def make(*shape: int) -> Any:
        values = torch.randn(*shape, device=device).to(torch.bfloat16)
        return values.contiguous(memory_format=torch.channels_last)

    torch.manual_seed(0)
    return SimpleNamespace(x=make(n, c, *spatial), w=make(k, c, *filt), y=make(n, k, *out_spatial))


def conv_calls(case: tuple, t: SimpleNamespace, dtype: Any = None) -> dict[str, Callable[[], Any]]:
    """td's call of the direction writing into the preallocated tensor, and torch's (cuDNN) call on the same
    tensors; with dtype, torch's call on copies in that dtype (the reference)."""
    import torch
    import torch.nn.functional as F

    import tiledispatch as td

    direction, pad = case[0], case[6]
    if dtype is not None:
        t = SimpleNamespace(**{name: v.to(dtype) for name, v in vars(t).items()})
    x_shape, w_shape = tuple(t.x.shape), tuple(t.w.shape)
    back, geometry = torch.ops.aten.convolution_backward, ([1, 1], [pad, pad], [1, 1], False, [0, 0], 1)
    if direction == "fwd":
        return {"td_api": lambda: td.conv(t.x, t.w, padding=pad, out=t.y),
                "torch": lambda: F.conv2d(t.x, t.w, None, 1, pad)}
    if direction == "bwd_data":
        return {"td_api": lambda: td.conv_bwd_data(t.y, t.w, x_shape, padding=pad, out=t.x),
                "torch": lambda: back(t.y, t.x, t.w, None, *geometry, [True, False, False])[0]}
    return {"td_api": lambda: td.conv_bwd_weight(t.x, t.y, w_shape, padding=pad, out=t.w),
            "torch": lambda: back(t.y, t.x, t.w, None, *geometry, [False, True, False])[1]}


def conv_reference(case: tuple, t: SimpleNamespace) -> Any:
    """The direction in float32 by cuDNN, TF32 off."""
    import torch

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        return conv_calls(case, t, torch.float32)["torch"]()


def measure_conv(case: tuple, registries: dict[str, Any], opts: argparse.Namespace, env: Any) -> dict:
    import tiledispatch as td

    direction, n, c, k, spatial, filt, pad = case
    problem = td.ConvProblem(direction, n, c, k, 1, spatial, filt, padding=pad, dtype="bf16")
    if direction not in registries:
        registries[direction] = preset_registry(CONV_PRESET.format(direction), opts)[0]
    registry = registries[direction]
    t = conv_tensors(case, env.device)
    fns = conv_calls(case, t)
    if opts.smoke:
        del fns["torch"]   # a real CPU convolution: not comparable with skipped launches
    reference = None if opts.smoke else conv_reference(case, t)
    row: dict[str, Any] = {"id": conv_id(case), "direction": direction, "n": n, "c": c, "k": k,
                           "spatial": list(spatial), "filter": list(filt), "padding": pad, "dtype": "bf16",
                           "td_conv_kernel": registry.select(problem, "auto").kernel.name}   # td.conv*'s
    row["rel_err"], row["unavailable"] = first_calls(fns, getattr(t, WRITTEN[direction]), reference,
                                                     JUDGED["conv"])
    row["valid"] = all(err < TOLERANCE for err in row["rel_err"].values())
    row.update(timings(fns, opts, env))
    return row


# -- environment ---------------------------------------------------------------------------------------------
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


def code_revision() -> dict[str, Any]:
    """Which tiledispatch this run measured: its directory, a digest of its sources (.py and preset .json),
    and the git commit of the repository around it (git_tracked: whether that repository tracks the package;
    an ignored copy such as .baseline/src is not; git_dirty: uncommitted changes to it)."""
    import tiledispatch

    package = Path(tiledispatch.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".json") and "__pycache__" not in path.parts and path.is_file():
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True,
                                  timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    rev = git("rev-parse", "HEAD")
    tracked = rev is not None and git("ls-files", "--error-unmatch", "__init__.py") is not None
    dirty = bool(git("status", "--porcelain", "--", ".")) if tracked else None
    return {"package": str(package), "sources_sha256": digest.hexdigest()[:16], "git_rev": rev,
            "git_tracked": tracked, "git_dirty": dirty}


def header(opts: argparse.Namespace) -> dict[str, Any]:
    import torch
    import triton

    import tiledispatch as td

    return {"benchmark": "dispatch_overhead", "mode": "smoke" if opts.smoke else "gpu",
            "label": getattr(opts, "label", None), "code": code_revision(),
            "gpu": "cpu (Triton interpreter, launches skipped)" if opts.smoke else
            torch.cuda.get_device_name(),
            "host_cpu": host_cpu(), "tiledispatch": td.__version__, "triton": triton.__version__,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "preset": PRESET,
            "limit_us": LIMIT_US, "calls": opts.calls, "issue_calls": opts.issue_calls, "trials": opts.trials,
            "graph_calls": GRAPH_CALLS,
            "protocol": __doc__.split("\n\n")[1].replace("\n", " ").removeprefix("Protocol: "),
            "argv": sys.argv[1:]}


def smoke_environment(opts: argparse.Namespace) -> SimpleNamespace:
    """CPU tensors run Triton's interpreter, whose launches this makes no-ops (counted), and every preset is
    cut to its first --smoke-kernels configs (builds take seconds): tiledispatch itself is not touched."""
    import torch
    from triton.runtime.interpreter import InterpretedFunction

    from tiledispatch import presets

    launches = [0]

    def skipped_launch(self: Any, *args: Any, **kwargs: Any) -> None:
        launches[0] += 1

    InterpretedFunction.run = skipped_launch
    full = presets.load_preset
    presets.load_preset = lambda name: full(name)[: opts.smoke_kernels]
    return SimpleNamespace(device=torch.device("cpu"), sync=lambda: None, stream=lambda: 0,
                           launches=lambda: launches[0])


def gpu_environment() -> SimpleNamespace:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible: run on a GPU machine, or use --smoke")
    return SimpleNamespace(device=torch.device("cuda"), sync=torch.cuda.synchronize,
                           stream=lambda: torch.cuda.current_stream().cuda_stream, launches=None)


def preset_registry(name: str, opts: argparse.Namespace) -> tuple[Any, str]:
    """A registry of the preset on the default arch (as td.gemm / td.conv* build theirs), built."""
    import tiledispatch as td

    registry = td.Registry()
    kernels = registry.add_preset(name)
    if opts.smoke and len(kernels) > opts.smoke_kernels:
        raise SystemExit(f"--smoke: the preset cut did not take ({name} added {len(kernels)} kernels, not "
                         f"<= {opts.smoke_kernels}): Registry.add_preset no longer reads presets.load_preset")
    return registry, str(registry.build())


# -- main ----------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", help="names the code measured (e.g. before / after), kept in the JSON")
    parser.add_argument("--calls", type=int, help="calls per timed loop (default 2000; smoke 500)")
    parser.add_argument("--issue-calls", type=int, default=200, help="calls per issue-only loop")
    parser.add_argument("--trials", type=int,
                        help="timed trials per variant, median reported (default 7; smoke 3)")
    parser.add_argument("--out", help="JSON path (default: see default_out)")
    parser.add_argument("--smoke", action="store_true", help="no GPU: check the control flow on CPU")
    parser.add_argument("--smoke-kernels", type=int, default=2, help="configs per preset in a smoke run")
    parser.add_argument("--no-conv", action="store_true", help="GEMM rows only")
    opts = parser.parse_args(argv)
    opts.calls = opts.calls or (500 if opts.smoke else 2000)
    opts.trials = opts.trials or (3 if opts.smoke else 7)
    return opts


def default_out(result: dict[str, Any]) -> Path:
    """smoke: /tmp/dispatch_overhead_smoke[_<label>].json. GPU:
    benchmarks/results/dispatch_overhead_<gpu>.json (rendered into BENCHMARKS.md), or with a label
    benchmarks/results/dispatch_ab_<gpu>/dispatch_overhead_<label>.json (a folder tables.py does not render;
    tools/overhead_ab.py writes the same file names)."""
    label = result.get("label")
    if result["mode"] == "smoke":
        return Path(tempfile.gettempdir()) / f"dispatch_overhead_smoke{'_' + label if label else ''}.json"
    slug = gpu_slug(result["gpu"])
    if label:
        return ROOT / "benchmarks" / "results" / f"dispatch_ab_{slug}" / f"dispatch_overhead_{label}.json"
    return ROOT / "benchmarks" / "results" / f"dispatch_overhead_{slug}.json"


def print_row(row: dict[str, Any]) -> None:
    cells = " | ".join(f"{name} {us:.2f}" for name, us in row["per_call_us"].items())
    issue = " | ".join(f"{name} {us:.2f}" for name, us in row["issue_us"].items())
    kernel = row.get("kernel") or row.get("td_conv_kernel")
    line = f"{row['id']} {kernel}: {cells} us/call (issue only: {issue})"
    if row.get("overhead_us"):
        over = ", ".join(f"{name} {us:+.2f}" for name, us in row["overhead_us"].items())
        verdict = "PASS" if row["pass"] else "FAIL"
        line += f" | overhead vs direct: {over} -> {verdict} (limit {LIMIT_US:g} us)"
    print(line + ("" if row["valid"] else " | WRONG OUTPUT"), flush=True)


def measure(opts: argparse.Namespace, env: Any, result: dict[str, Any]) -> None:
    registry, result["build"] = preset_registry(PRESET, opts)
    print(f"{PRESET}: {result['build']}", flush=True)
    result["rows"], result["conv_rows"] = [], []
    for shape in PROBLEMS:
        result["rows"].append(measure_gemm(registry, shape, opts, env))
        print_row(result["rows"][-1])
    registries: dict[str, Any] = {}
    for case in () if opts.no_conv else CONV_PROBLEMS:
        result["conv_rows"].append(measure_conv(case, registries, opts, env))
        print_row(result["conv_rows"][-1])
    if env.launches is not None and not env.launches():
        raise SystemExit("--smoke: no launch reached Triton's interpreter (the stand-in did not take)")


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    env = smoke_environment(opts) if opts.smoke else gpu_environment()
    result = header(opts)
    result.update({"conv_preset": CONV_PRESET.format("<direction>"), "judged": JUDGED})
    out = Path(opts.out) if opts.out else default_out(result)
    measure(opts, env, result)
    rows = result["rows"] + result["conv_rows"]
    result["valid"] = all(row["valid"] for row in rows)
    result["pass"] = result["valid"] and all(row["pass"] is not False for row in result["rows"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"{'PASS' if result['pass'] else 'FAIL'}; wrote {out}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":   # Registry.build spawns workers, which re-import this file
    sys.exit(main())
