"""GPU: host time of replaying a CUDA graph of td's conv launches against one of torch's, per graph node.

Under torch.compile(mode="reduce-overhead") a converted EfficientNet-B0 training step spent 4.25 ms of host
time in cudaGraphLaunch against 1.92 ms stock, with fewer kernels per step (H100, stop 52,
probe_compiled_step_h100_stop52.json). This captures N calls of one op (td.conv* directions of a depthwise
and a dense layer, and torch's conv2d / convolution_backward of the same layers) into a graph, times
graph.replay()'s host part, and lists the graph's node types, so the cost per node of each kind of launch
shows apart from everything else in a step; two trivial Triton kernels with 2 and 50 arguments
(probe_graph_kernels.py) tell whether the size of a node's parameter block matters.

Usage (GPU):  python tools/probe_graph_launch.py [--calls 200] [--out F.json]
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (name, channels, groups, kernel, size, batch)
LAYERS = (("dw3x3 128 28x28 n8", 128, 128, 3, 28, 8), ("1x1 128 28x28 n8", 128, 1, 1, 28, 8),
          ("3x3 64 56x56 n8", 64, 1, 3, 56, 8))
TD_PREFIXES = ("conv_", "gemm_", "pad_copy", "copy_")   # td's generated entry names


def _driver() -> Any:
    from cuda.bindings import driver
    return driver


def _origin(name: str) -> str:
    if name.startswith("triton_"):
        return "inductor"
    if name.startswith(TD_PREFIXES):
        return "td"
    return "vendor/other"


def _param_bytes(drv: Any, func: Any) -> int | None:
    """Size of a kernel's parameter block (offset + size of its last parameter), or None if unreadable."""
    end, index = 0, 0
    while index < 512:
        err, offset, size = drv.cuFuncGetParamInfo(func, index)
        if err != drv.CUresult.CUDA_SUCCESS:
            break
        end, index = max(end, offset + size), index + 1
    return end if index else None


def census(graph: Any) -> dict[str, Any]:
    """Nodes of a kept CUDAGraph by type, and its kernel nodes by origin (count, parameter bytes, CTAs)."""
    try:
        drv = _driver()
        g = drv.CUgraph(init_value=graph.raw_cuda_graph())
        err, _, count = drv.cuGraphGetNodes(g, 0)
        err, nodes, count = drv.cuGraphGetNodes(g, count)
        types: collections.Counter = collections.Counter()
        kernels: dict[str, dict[str, Any]] = {}
        names: collections.Counter = collections.Counter()
        for node in nodes:
            err, kind = drv.cuGraphNodeGetType(node)
            kind_name = str(kind).rsplit(".", 1)[-1]
            types[kind_name] += 1
            if "KERNEL" not in kind_name:
                continue
            err, params = drv.cuGraphKernelNodeGetParams(node)
            func = params.func
            err, raw = drv.cuFuncGetName(func)
            if err != drv.CUresult.CUDA_SUCCESS:   # a library kernel (CUkernel) rather than a CUfunction
                err, raw = drv.cuKernelGetName(params.kern)
            ok = err == drv.CUresult.CUDA_SUCCESS
            name = (raw.decode() if isinstance(raw, bytes) else str(raw)) if ok else f"? ({err})"
            origin = _origin(name)
            row = kernels.setdefault(origin, {"nodes": 0, "param_bytes": [], "ctas": [], "smem": []})
            row["nodes"] += 1
            row["param_bytes"].append(_param_bytes(drv, func))
            row["ctas"].append(params.gridDimX * params.gridDimY * params.gridDimZ)
            row["smem"].append(params.sharedMemBytes)
            names[f"{origin}:{name[:60]}"] += 1
        for row in kernels.values():
            pb = [b for b in row["param_bytes"] if b is not None]
            row["param_bytes"] = {"median": statistics.median(pb) if pb else None,
                                  "max": max(pb, default=None), "sum": sum(pb)}
            row["ctas"] = {"median": statistics.median(row["ctas"]), "max": max(row["ctas"])}
            row["smem"] = {"median": statistics.median(row["smem"]), "max": max(row["smem"])}
        return {"nodes": int(count), "types": dict(types), "kernels": kernels,
                "top_names": dict(names.most_common(25))}
    except (ImportError, AttributeError, TypeError, RuntimeError, ValueError) as exc:   # report, go on
        return {"error": f"{type(exc).__name__}: {exc}"}


def time_replay(graph: Any, repeats: int = 15) -> dict[str, Any]:
    """Medians of the host time of graph.replay() alone (the device synchronized before each) and of its GPU
    time (CUDA events around it)."""
    import torch

    host, gpu = [], []
    for _ in range(repeats):
        start_evt, end_evt = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start_evt.record()
        start = time.perf_counter()
        graph.replay()
        host.append((time.perf_counter() - start) * 1e6)
        end_evt.record()
        torch.cuda.synchronize()
        gpu.append(start_evt.elapsed_time(end_evt) * 1e3)
    return {"replay_host_us": round(statistics.median(host), 1),
            "replay_gpu_us": round(statistics.median(gpu), 1)}


def replay_us(fn: Callable[[], object], calls: int) -> dict[str, Any]:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    row = time_replay(graph)
    row.update(census(graph))
    if "nodes" in row and row["nodes"]:
        row["host_us_per_node"] = round(row["replay_host_us"] / row["nodes"], 2)
    return row


def probe(spec: tuple, calls: int) -> list[dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    import tiledispatch as td
    from tiledispatch.dispatch import entry
    from tiledispatch.errors import TileDispatchError

    name, c, groups, k, size, n = spec
    torch.manual_seed(0)
    cl = torch.channels_last
    x = torch.randn(n, c, size, size, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
    w = torch.randn(c, c // groups, k, k, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
    dy = torch.randn(n, c, size, size, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
    pad = k // 2
    ops = {
        "td fwd": lambda: td.conv(x, w, None, 1, pad, 1, groups),
        "td bwd_data": lambda: td.conv_bwd_data(dy, w, x.shape, 1, pad, 1, groups),
        "td bwd_weight": lambda: td.conv_bwd_weight(x, dy, w.shape, 1, pad, 1, groups),
        "torch fwd": lambda: F.conv2d(x, w, None, 1, pad, 1, groups),
        "torch bwd (dx, dw)": lambda: torch.ops.aten.convolution_backward(
            dy, x, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], groups, [True, True, False]),
    }
    rows = []
    for op, fn in ops.items():
        row = {"layer": name, "op": op}
        try:
            if op.startswith("td"):
                direction = op.split()[1]
                args = {"fwd": (x, w, w.shape), "bwd_data": (dy, w, x.shape), "bwd_weight": (x, dy, w.shape)}
                fn()
                sel = entry.conv_plan(direction, *args[direction], 1, pad, 1, groups)
                row["plan"] = None if sel is None else sel.kernel.name
            row.update(replay_us(fn, calls))
        except (RuntimeError, TileDispatchError) as exc:   # one failing op must not hide the others
            row["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(row))
        rows.append(row)
    return rows


def synthetic_rows(calls: int) -> list[dict[str, Any]]:
    """Graphs of a trivial Triton kernel with 2 arguments and with 50: whether the host cost of a replay
    grows with a node's parameter block (td's conv kernels take dozens of shape and stride scalars)."""
    import torch

    from probe_graph_kernels import few_args, many_args

    x = torch.zeros(1024, device="cuda")
    scalars = list(range(3, 51))   # not 1: Triton specializes arguments equal to 1 into constants
    ops = {"triton, 2 args": lambda: few_args[(1,)](x, 1024, BLOCK=128),
           "triton, 50 args": lambda: many_args[(1,)](x, 1024, *scalars, BLOCK=128)}
    rows = []
    for op, fn in ops.items():
        row = {"layer": "synthetic", "op": op, **replay_us(fn, calls)}
        print(json.dumps(row))
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    rows = synthetic_rows(opts.calls) + [row for spec in LAYERS for row in probe(spec, opts.calls)]
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "calls": opts.calls,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
