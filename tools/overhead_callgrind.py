"""Hot-path A/B of td.gemm / td.conv* on CPU (issue 34): instructions per call under callgrind, and wall
medians, before (a source tree) and after (src/), with every remembered launch replaced by a no-op, so only
the Python dispatch path of a repeated call is measured (docs/design/hot_path_ab.md).

Each side runs in its own process (PYTHONPATH=<its src>): a one-kernel registry per op installed as the
default, one real first call (select, bind, remember), then `bound` of every remembered decision set to a
no-op. Loops run inside functools.reduce (a C function), so callgrind counts only them
(--toggle-collect / --dump-after=functools_reduce); per call = the slope over the loop lengths, which cancels
the loop's set-up. Wall: two live workers, sides alternating per round.

Usage:  python tools/overhead_callgrind.py [--before .baseline/src] [--after src] [--calls 1000,2000,4000]
            [--rounds 7] [--wall-calls 20000] [--out benchmarks/results/dispatch_overhead_callgrind_cpu.json]
.baseline/src: `mkdir -p .baseline && git archive d52d3a0 src | tar -x -C .baseline`.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("before", "after")
OPS = ("gemm", "conv_fwd", "conv_bwd_data", "conv_bwd_weight")
EMPTY = "empty"                        # the loop alone: reduce calling a lambda that returns None
DIRECTIONS = {"conv_fwd": "fwd", "conv_bwd_data": "bwd_data", "conv_bwd_weight": "bwd_weight"}
GEMM_MNK = (64, 64, 64)
# conv: x (N, C, H, W), w (K, C, R, S), padding 1, stride 1, one group; dy (N, K, H, W)
CONV_X, CONV_W, CONV_Y, CONV_PAD = (1, 16, 8, 8), (16, 16, 3, 3), (1, 16, 8, 8), 1
CONV_TILE: dict[str, Any] = {"family": "igemm", "block_m": 32, "block_n": 16, "block_k": 16, "num_warps": 4,
                             "num_stages": 2, "kloop": "tap", "align": 8}
REDUCE = "functools_reduce"            # CPython's C function behind functools.reduce


# -- worker: one side, in its own process ---------------------------------------------------------------
def _noop(*args: Any) -> None:
    return None


class _Probe:
    """A no-op launch that counts its calls (proves the loop takes the remembered decision)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any) -> None:
        self.calls += 1


def _registry(config: Any) -> Any:
    import tiledispatch as td

    registry = td.Registry("sm_90")
    registry.add(config)
    report = registry.build(max_workers=1)
    if report.failed:
        raise SystemExit(f"building {config.name} failed: {report.failed}")
    return registry


def _install(new: bool, gemm_key: tuple, conv_keys: dict[str, tuple], registries: dict[str, Any]) -> None:
    """The one-kernel registries as td.gemm's / td.conv*'s defaults (before: api._DEFAULTS /
    api._CONV_DEFAULTS keyed without the op; after: dispatch.defaults.install)."""
    if new:
        from tiledispatch.dispatch import defaults

        defaults.install(("gemm", *gemm_key), registries["gemm"])
        for op, key in conv_keys.items():
            defaults.install(("conv", *key), registries[op])
    else:
        api = _old_api()
        api._DEFAULTS[gemm_key] = registries["gemm"]
        for op, key in conv_keys.items():
            api._CONV_DEFAULTS[key] = registries[op]


def _old_api() -> Any:
    """The before tree's tiledispatch.api, whose memo and defaults were module globals."""
    import importlib

    return importlib.import_module("tiledispatch.api")


def _decisions(new: bool) -> list[Any]:
    """Every remembered decision of td.gemm and td.conv* (the objects whose `bound` the hot path calls)."""
    if new:
        from tiledispatch.dispatch import defaults

        return [*defaults.GEMM.memo.values(), *defaults.CONV.memo.values()]
    api = _old_api()
    return [entry for *_, entry in (*api._MEMO.values(), *api._CONV_MEMO.values())]


def setup() -> tuple[dict[str, Callable[[Any, Any], Any]], dict[str, Any]]:
    """Per op, the loop body of one hot-path call, and what was measured (tree, configs, kernels)."""
    import importlib.util

    import torch

    import tiledispatch as td
    from tiledispatch.configs.conv import ConvConfig
    from tiledispatch.testing import matrix, small_config

    new = importlib.util.find_spec("tiledispatch.dispatch") is not None
    configs: dict[str, Any] = {"gemm": small_config("tiled", "rcr", "fp16", align=16)}
    for op, direction in DIRECTIONS.items():
        configs[op] = ConvConfig(direction=direction, ndim=2, dtype="fp16", **CONV_TILE)
    registries = {op: _registry(config) for op, config in configs.items()}
    _install(new, ("fp16", "rcr", td.Epilogue()), {op: (d, "fp16", 2, "none", False)
                                                   for op, d in DIRECTIONS.items()}, registries)
    m, n, k = GEMM_MNK
    a, b = matrix(m, k, dtype="fp16"), matrix(k, n, letter="c", dtype="fp16")
    cl, f16, pad = torch.channels_last, torch.float16, CONV_PAD
    x, w, dy = (torch.randn(s, dtype=f16).contiguous(memory_format=cl) for s in (CONV_X, CONV_W, CONV_Y))
    x_shape, w_shape = tuple(x.shape), tuple(w.shape)
    gemm, conv, bwd_data, bwd_weight = td.gemm, td.conv, td.conv_bwd_data, td.conv_bwd_weight
    bodies: dict[str, Callable[[Any, Any], Any]] = {
        EMPTY: lambda acc, i: None,
        "gemm": lambda acc, i: gemm(a, b),
        "conv_fwd": lambda acc, i: conv(x, w, padding=pad),
        "conv_bwd_data": lambda acc, i: bwd_data(dy, w, x_shape, padding=pad),
        "conv_bwd_weight": lambda acc, i: bwd_weight(x, dy, w_shape, padding=pad),
    }
    _check_first_calls(bodies, (a, b, x, w, dy, pad))
    kernels = _no_op_launches(new, bodies)
    info = {"package": td.__file__, "tree": "after (dispatch/)" if new else "before (api.py memo)",
            "configs": {op: c.name for op, c in configs.items()}, "kernels": kernels,
            "hit_path": {op: hit_path(bodies[op]) for op in OPS},
            "python": sys.version.split()[0], "torch": torch.__version__}
    return bodies, info


def _check_first_calls(bodies: dict[str, Callable[[Any, Any], Any]], tensors: tuple) -> None:
    """The first call of each op (selects, binds, runs the kernel on the interpreter) against torch."""
    import torch.nn.functional as F
    from torch.nn import grad

    a, b, x, w, dy, pad = tensors
    want = {"gemm": lambda: a.float() @ b.float(),
            "conv_fwd": lambda: F.conv2d(x.float(), w.float(), padding=pad),
            "conv_bwd_data": lambda: grad.conv2d_input(x.shape, w.float(), dy.float(), padding=pad),
            "conv_bwd_weight": lambda: grad.conv2d_weight(x.float(), w.shape, dy.float(), padding=pad)}
    for op in OPS:
        got = bodies[op](None, 0).float()
        ref = want[op]()
        err = float((got - ref).norm() / ref.norm())
        if err > 1e-2:
            raise SystemExit(f"{op}: first call off by {err:.2e} (relative)")


def _no_op_launches(new: bool, bodies: dict[str, Callable[[Any, Any], Any]]) -> dict[str, str]:
    """Give every remembered decision a counting no-op launch, prove each op's repeated call reaches exactly
    one of them (the hit path, nothing re-decided), then a plain no-op. Returns the kernel of each op's
    decision."""
    decisions = _decisions(new)
    if len(decisions) != len(OPS):
        raise SystemExit(f"expected {len(OPS)} remembered decisions, found {len(decisions)}")
    probes = [_Probe() for _ in decisions]
    for decision, probe in zip(decisions, probes):
        decision.bound = probe
    kernels = {}
    for op in OPS:
        counts = [p.calls for p in probes]
        for _ in range(3):
            bodies[op](None, 0)
        moved = [i for i, p in enumerate(probes) if p.calls != counts[i]]
        once = len(moved) == 1 and probes[moved[0]].calls - counts[moved[0]] == 3
        if not once or len(_decisions(new)) != len(OPS):
            raise SystemExit(f"{op}: a repeated call did not take its remembered launch")
        kernels[op] = decisions[moved[0]].selection.kernel.name
    for decision in decisions:
        decision.bound = _noop
    return kernels


def hit_path(body: Callable[[Any, Any], Any]) -> list[str]:
    """The Python functions (file:line) and C functions one call of `body` enters, in order (sys.setprofile):
    what the hit path does, to read next to its instruction count."""
    events: list[str] = []

    def record(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            events.append(f"{code.co_name} {Path(code.co_filename).name}:{code.co_firstlineno}")
        elif event == "c_call":
            events.append(f"C {getattr(arg, '__qualname__', arg)}")

    sys.setprofile(record)
    try:
        body(None, 0)
    finally:
        sys.setprofile(None)
    return events[1:-1]   # without the loop's lambda and the sys.setprofile call


def loop(body: Callable[[Any, Any], Any], calls: int) -> None:
    """`calls` hot-path calls inside one functools.reduce (the C function callgrind toggles on)."""
    import functools

    functools.reduce(body, range(calls), None)


def worker(opts: argparse.Namespace) -> None:
    """Set up, print the info line, then either run the callgrind loops or serve wall timings on stdin."""
    import time

    bodies, info = setup()
    if opts.callgrind:
        sequence = [(op, n) for op in (EMPTY, *OPS) for n in opts.calls]
        print(json.dumps({**info, "sequence": sequence}), flush=True)
        for op, n in sequence:
            loop(bodies[op], n)
        return
    print(json.dumps(info), flush=True)
    for line in sys.stdin:   # "<op> <calls> <samples>": per sample, seconds per call
        op, calls, samples = line.split()
        times = []
        for _ in range(int(samples)):
            start = time.perf_counter()
            loop(bodies[op], int(calls))
            times.append((time.perf_counter() - start) / int(calls))
        print(json.dumps(times), flush=True)


# -- driver ------------------------------------------------------------------------------------------------
def side_env(src: Path, cache: Path) -> dict[str, str]:
    """One side's environment: its tree first on the path, private cache and tuning DB, measuring off,
    fixed hash seed (callgrind counts are then repeatable)."""
    return {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0", "TILEDISPATCH_MEASURE": "0",
            "TILEDISPATCH_CACHE_DIR": str(cache / "build"), "TILEDISPATCH_MAX_WORKERS": "1",
            "TILEDISPATCH_TUNING_DB": str(cache / "tuning.json"), "PYTHONWARNINGS": "ignore"}


def worker_cmd(extra: list[str]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--worker", *extra]


def check_tree(side: str, info: dict[str, Any], src: Path) -> None:
    if not Path(info["package"]).resolve().is_relative_to(src.resolve()):
        raise SystemExit(f"{side}: imported {info['package']}, not from {src}")


def _pipes(proc: subprocess.Popen[str]) -> tuple[Any, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    return proc.stdin, proc.stdout


def wall(opts: argparse.Namespace, srcs: dict[str, Path], caches: dict[str, Path]) -> dict[str, Any]:
    """Per side and op, the median over rounds x samples of seconds per call (sides alternate each round:
    before, after, after, before, ...), with both workers alive throughout."""
    procs: dict[str, subprocess.Popen[str]] = {}
    infos = {}
    for side in SIDES:
        procs[side] = subprocess.Popen(worker_cmd([]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, env=side_env(srcs[side], caches[side]), cwd=ROOT)
        infos[side] = json.loads(_pipes(procs[side])[1].readline())
        check_tree(side, infos[side], srcs[side])
    samples: dict[str, dict[str, list[float]]] = {s: {op: [] for op in (EMPTY, *OPS)} for s in SIDES}
    try:
        for r in range(opts.rounds):
            for op in (EMPTY, *OPS):
                for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
                    stdin, stdout = _pipes(procs[side])
                    stdin.write(f"{op} {opts.wall_calls} {opts.samples}\n")
                    stdin.flush()
                    samples[side][op] += json.loads(stdout.readline())
            print(f"wall round {r + 1}/{opts.rounds} done", flush=True)
    finally:
        for proc in procs.values():
            _pipes(proc)[0].close()
            proc.wait(timeout=60)
    us = {s: {op: statistics.median(v) * 1e6 for op, v in samples[s].items()} for s in SIDES}
    spread = {s: {op: (min(v) * 1e6, max(v) * 1e6) for op, v in samples[s].items()} for s in SIDES}
    return {"us": us, "range_us": spread, "infos": infos}


_HEADER = re.compile(r"^(part|thread|summary|totals|desc: Trigger):\s*(.*)$", re.M)


def callgrind_parts(out_base: Path) -> list[tuple[str, int]]:
    """(trigger, Ir) of every dump of the main thread callgrind wrote under `out_base` (files out_base.<part>
    or out_base.<part>-<thread> with --separate-threads=yes), in dump order."""
    parts = []
    for path in out_base.parent.glob(out_base.name + "*"):
        fields = dict(_HEADER.findall(path.read_text()))
        if int(fields.get("thread", "1")) != 1:
            continue
        total = int(fields.get("summary") or fields.get("totals") or 0)
        parts.append((int(fields.get("part", "0") or 0), fields.get("desc: Trigger", ""), total))
    return [(trigger, total) for _, trigger, total in sorted(parts)]


def callgrind(opts: argparse.Namespace, side: str, src: Path, cache: Path, work: Path) -> dict[str, Any]:
    """Instructions of each loop of the worker's sequence, one valgrind run of `side`."""
    base = work / f"callgrind.{side}"
    cmd = [opts.valgrind, "--tool=callgrind", "--collect-atstart=no", "--separate-threads=yes",
           f"--toggle-collect={REDUCE}",
           f"--dump-after={REDUCE}", f"--callgrind-out-file={base}", *worker_cmd(
               ["--callgrind", "--calls", ",".join(map(str, opts.calls))])]
    print(f"== callgrind {side}: {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd, env=side_env(src, cache), cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"callgrind {side} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    check_tree(side, info, src)
    mine = [ir for trigger, ir in callgrind_parts(base) if REDUCE in trigger][-len(info["sequence"]):]
    if len(mine) != len(info["sequence"]):
        raise SystemExit(f"callgrind {side}: {len(mine)} loop dumps for {len(info['sequence'])} loops")
    loops: dict[str, dict[int, int]] = {}
    for (op, n), ir in zip(info["sequence"], mine):
        loops.setdefault(op, {})[n] = ir
    return {"loops": loops, "info": info}


def slope(points: dict[int, int]) -> tuple[float, float]:
    """Least-squares instructions per call over the loop lengths, and the largest residual (instructions)."""
    xs, ys = list(points), [points[n] for n in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return b, max(abs(y - (my + b * (x - mx))) for x, y in zip(xs, ys))


def summarize(cg: dict[str, Any], walls: dict[str, Any]) -> dict[str, Any]:
    """Per op: instructions per call (loop overhead removed) and wall µs per call, before / after / delta, and
    the delta in µs at this machine's instructions per µs on these paths."""
    ir = {s: {op: slope(cg[s]["loops"][op]) for op in (EMPTY, *OPS)} for s in SIDES}
    us = walls["us"]
    net_ir = {s: {op: ir[s][op][0] - ir[s][EMPTY][0] for op in OPS} for s in SIDES}
    net_us = {s: {op: us[s][op] - us[s][EMPTY] for op in OPS} for s in SIDES}
    rate = statistics.median(net_ir[s][op] / net_us[s][op] for s in SIDES for op in OPS)   # Ir per µs
    rows = {}
    for op in OPS:
        delta = net_ir["after"][op] - net_ir["before"][op]
        rows[op] = {
            "ir_per_call": {s: round(net_ir[s][op], 1) for s in SIDES},
            "ir_delta": round(delta, 1),
            "ir_fit_max_residual": {s: round(ir[s][op][1], 1) for s in SIDES},
            "wall_us_per_call": {s: round(net_us[s][op], 3) for s in SIDES},
            "wall_us_delta": round(net_us["after"][op] - net_us["before"][op], 3),
            "wall_us_range": {s: [round(v - us[s][EMPTY], 3) for v in walls["range_us"][s][op]]
                              for s in SIDES},
            "est_us_delta_from_ir": round(delta / rate, 3),
        }
    loop_overhead = {s: {"ir": round(ir[s][EMPTY][0], 1), "us": round(us[s][EMPTY], 4)} for s in SIDES}
    return {"ops": rows, "ir_per_us": round(rate, 1), "loop_overhead_per_call": loop_overhead}


def tree_state(src: Path, rev: str) -> dict[str, Any]:
    """How the package under `src` differs from src/tiledispatch at git revision `rev` of this repository
    (blob hashes compared file by file; __pycache__ left out)."""
    listing = subprocess.run(["git", "ls-tree", "-r", rev, "--", "src/tiledispatch"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    want = {line.split("\t", 1)[1]: line.split()[2] for line in listing.splitlines()}
    have = {}
    for path in (src / "tiledispatch").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            data = path.read_bytes()
            name = "src/" + path.relative_to(src).as_posix()
            have[name] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    differ = sorted(p for p in want.keys() | have.keys() if want.get(p) != have.get(p))
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    return {"git": commit, "files_differing": differ}


def machine() -> str:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{model or platform.processor()}, {os.cpu_count()} logical CPUs, {platform.platform()}"


def table(result: dict[str, Any]) -> str:
    lines = ["| op | Ir/call before | after | Δ Ir | wall µs before | after | Δ µs | Δ µs from Ir |",
             "|---|---|---|---|---|---|---|---|"]
    for op, r in result["ops"].items():
        i, w = r["ir_per_call"], r["wall_us_per_call"]
        lines.append(f"| {op} | {i['before']:.0f} | {i['after']:.0f} | {r['ir_delta']:+.0f} "
                     f"| {w['before']:.3f} | {w['after']:.3f} | {r['wall_us_delta']:+.3f} "
                     f"| {r['est_us_delta_from_ir']:+.3f} |")
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, default=ROOT / ".baseline" / "src")
    p.add_argument("--after", type=Path, default=ROOT / "src")
    p.add_argument("--before-rev", default="d52d3a0", help="the revision --before is compared with")
    p.add_argument("--calls", type=lambda s: [int(v) for v in s.split(",")], default=[1000, 2000, 4000],
                   help="loop lengths under callgrind (per call: the slope over them)")
    p.add_argument("--rounds", type=int, default=7, help="wall rounds (sides alternate)")
    p.add_argument("--samples", type=int, default=3, help="wall samples per round, side and op")
    p.add_argument("--wall-calls", type=int, default=20000, help="calls per wall sample")
    p.add_argument("--valgrind", default="/usr/bin/valgrind")
    p.add_argument("--cache-root", type=Path, default=Path(tempfile.gettempdir()) / "td-overhead-callgrind")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results"
                   / "dispatch_overhead_callgrind_cpu.json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--callgrind", action="store_true", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if len(set(opts.calls)) < 2:
        p.error("--calls needs at least two different loop lengths")
    return opts


def main(argv: list[str] | None = None) -> None:
    opts = parse(argv)
    if opts.worker:
        worker(opts)
        return
    srcs = {"before": opts.before.resolve(), "after": opts.after.resolve()}
    for side, src in srcs.items():
        if not (src / "tiledispatch" / "__init__.py").is_file():
            raise SystemExit(f"{side}: no tiledispatch package under {src}")
    caches = {side: opts.cache_root / side for side in SIDES}
    walls = wall(opts, srcs, caches)   # first: also builds (or loads) each side's kernels outside valgrind
    with tempfile.TemporaryDirectory(prefix="td-callgrind-") as work:
        cg = {side: callgrind(opts, side, srcs[side], caches[side], Path(work)) for side in SIDES}
    for side in SIDES:
        if cg[side]["info"]["kernels"] != walls["infos"][side]["kernels"]:
            raise SystemExit(f"{side}: callgrind and wall runs selected different kernels")
    if walls["infos"]["before"]["kernels"] != walls["infos"]["after"]["kernels"]:
        raise SystemExit(f"the sides selected different kernels: {walls['infos']}")
    result = summarize(cg, walls)
    revs = {"before": opts.before_rev, "after": "HEAD"}
    record = {
        "what": "td.gemm / td.conv* hit path (repeated call of one argument signature), launch replaced by a "
                "no-op: Python dispatch host path only; loop overhead (reduce + lambda) subtracted",
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
        "command": "python tools/overhead_callgrind.py " + " ".join(sys.argv[1:]),
        "sides": {s: {"src": str(srcs[s]), **tree_state(srcs[s], revs[s]),
                      **{k: v for k, v in walls["infos"][s].items() if k != "kernels"}} for s in SIDES},
        "kernels": walls["infos"]["after"]["kernels"],
        "problems": {"gemm": f"{'x'.join(map(str, GEMM_MNK))} fp16 rcr, strategy auto",
                     "conv": f"x {CONV_X}, w {CONV_W}, dy {CONV_Y} (NCHW sizes), padding {CONV_PAD}, "
                             "stride 1, groups 1, fp16 channels-last, strategy auto"},
        "callgrind": {"calls": opts.calls, "loop_ir": {s: cg[s]["loops"] for s in SIDES}},
        "wall": {"rounds": opts.rounds, "samples": opts.samples, "calls_per_sample": opts.wall_calls,
                 "raw_median_us": walls["us"]},
        **result,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(record, indent=1) + "\n")
    print(table(result))
    print(f"Ir per µs on this path: {result['ir_per_us']}; written {opts.out}")


if __name__ == "__main__":
    main()
