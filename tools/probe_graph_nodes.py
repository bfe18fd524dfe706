"""GPU: what the CUDA graphs of a compiled training step hold, stock vs converted, and their launch cost.

Under torch.compile(mode="reduce-overhead") a converted EfficientNet-B0 training step spent 4.25 ms of host
time in cudaGraphLaunch against 1.92 ms stock with fewer kernels, 1.58 against 0.87 ms in AccumulateGrad,
and ran an `aten::_foreach_copy_` stock does not (H100, stop 52, probe_compiled_step_h100_stop52.json). Per
variant this compiles the model, keeps the graphs cudagraph trees record (keep_graph), and reports per graph:
its nodes by type, its kernel nodes by origin (td, Inductor, vendor) with their parameter bytes, grid and
launch attributes, and the host time of one replay alone; the inputs each graph copies per replay; and per
parameter whether AccumulateGrad stole the gradient the backward graph wrote or cloned it (and why: strides).

Usage (GPU):  python tools/probe_graph_nodes.py [efficientnet_b0 ...] [--out F.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import models as bench  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_graph_launch import census, time_replay  # noqa: E402

WARMUP = 12
def keep_graphs() -> None:
    """Make every torch.cuda.CUDAGraph keep its cudaGraph_t after capture (instantiated on first replay), so
    that the nodes of the graphs cudagraph trees record can be listed."""
    import torch

    import inspect

    base = torch.cuda.CUDAGraph
    if getattr(base, "_td_kept", False):
        return
    if "keep_graph" not in inspect.signature(base.__new__).parameters:   # an older torch: no census
        print("keep_graphs: this torch's CUDAGraph has no keep_graph; node census unavailable", flush=True)
        return

    class Kept(base):   # type: ignore[misc,valid-type]
        _td_kept = True

        def __new__(cls, keep_graph: bool = True) -> Any:
            return super().__new__(cls, True)

        def __init__(self, keep_graph: bool = True) -> None:   # the C++ constructor reads the flag here
            super().__init__(True)

    torch.cuda.CUDAGraph = Kept   # type: ignore[misc]


def tree_nodes() -> list[Any]:
    """Every recorded CUDAGraphNode of device 0's cudagraph tree, roots first."""
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_manager(0, create_if_none_exists=False)
    if manager is None:
        return []
    out, stack = [], [n for nodes in manager.roots.values() for n in nodes]
    while stack:
        node = stack.pop(0)
        out.append(node)
        stack.extend(c for children in node.children.values() for c in children)
    return out


class CopyLog:
    """Records, per cudagraph node, the inputs _copy_inputs_and_remove_from_src copies into static buffers
    (CUDAGraphNode's method wrapped once per process; `seen` cleared per variant)."""

    seen: dict[int, list[tuple]] = {}
    _installed = False

    @classmethod
    def install(cls) -> None:
        from torch._inductor import cudagraph_trees

        cls.seen.clear()
        if cls._installed:
            return
        node_cls = cudagraph_trees.CUDAGraphNode
        original = getattr(node_cls, "_copy_inputs_and_remove_from_src", None)
        if original is None:   # another torch: no log, the probe goes on
            print("CopyLog: CUDAGraphNode._copy_inputs_and_remove_from_src not found", flush=True)
            return

        def wrapped(node: Any, *args: Any, **kwargs: Any) -> Any:
            srcs = args[1] if len(args) > 1 else kwargs.get("srcs")
            if id(node) not in cls.seen and isinstance(srcs, list):
                cls.seen[id(node)] = [(tuple(srcs[i].shape), tuple(srcs[i].stride()), str(srcs[i].dtype))
                                      for i in getattr(node, "non_static_input_idx", ())
                                      if i < len(srcs) and hasattr(srcs[i], "shape")]
            return original(node, *args, **kwargs)

        node_cls._copy_inputs_and_remove_from_src = wrapped
        cls._installed = True


def steals(model: Any, nodes: list[Any]) -> dict[str, Any]:
    """After a step: which parameters' .grad alias an output of a recorded graph (stolen by AccumulateGrad)
    and which were cloned, with the strides of the clones' parameters and gradients."""
    outputs = set()
    for node in nodes:
        for ref in getattr(node, "outputs_weakrefs", []) or []:
            if ref is not None and ref() is not None:
                outputs.add(ref.data_ptr())
    stolen, cloned = 0, []
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        if p.grad.untyped_storage().data_ptr() in outputs:
            stolen += 1
        else:
            cloned.append({"param": name, "shape": list(p.shape), "param_stride": list(p.stride()),
                           "grad_stride": list(p.grad.stride())})
    return {"stolen": stolen, "cloned": len(cloned), "cloned_params": cloned[:40]}


def probe(name: str) -> dict[str, Any]:
    spec = next(m for m in bench.MODELS if m.name == name)
    s = bench.Settings(phases=("train",), modes=("compiled",))
    base, _ = bench.build(spec)
    result: dict[str, Any] = {"model": name}
    for variant in bench.VARIANTS:
        try:
            result[variant] = probe_variant(spec, s, base, variant)
        except Exception as exc:  # noqa: BLE001 - a failing variant is a result, recorded; the other runs
            result[variant] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"{name} {variant}: {result[variant]['error']}", flush=True)
        bench._reset_compiled()
    return result


def probe_variant(spec: Any, s: Any, base: Any, variant: str) -> dict[str, Any]:
    """One variant: compile, warm up, census the recorded graphs, check the gradients, time steps."""
    import torch

    start = time.perf_counter()
    model, _ = bench._prepare(base, variant, torch.device("cuda"), torch.bfloat16, spec.video)
    x, labels = bench._inputs(spec, s, torch.device("cuda"), torch.bfloat16, bench._num_classes(base))
    model.train()
    runner = torch.compile(model, mode="reduce-overhead")
    step = bench.make_step("train", runner, model, x, labels, True)
    CopyLog.install()
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    nodes = tree_nodes()
    row: dict[str, Any] = {"first_s": round(time.perf_counter() - start, 1), "graphs": []}
    step()
    torch.cuda.synchronize()
    row["grads"] = steals(model, nodes)
    for node in nodes:
        graph = getattr(node, "graph", None)
        if graph is None:
            continue
        entry = {"copied_inputs": CopyLog.seen.get(id(node)), **census(graph), **time_replay(graph)}
        if entry.get("nodes"):
            entry["host_us_per_node"] = round(entry["replay_host_us"] / entry["nodes"], 2)
        row["graphs"].append(entry)
    times = []
    for _ in range(20):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    row["sync_step_ms"] = round(statistics.median(times), 3)
    print(json.dumps({variant: {k: v for k, v in row.items() if k != "graphs"}})[:3000], flush=True)
    for g in row["graphs"]:
        print(json.dumps({k: g.get(k) for k in ("nodes", "types", "replay_host_us", "host_us_per_node",
                                                "copied_inputs", "error")})[:1500], flush=True)
        print("   kernels:", json.dumps(g.get("kernels"))[:1500], flush=True)
    del runner, model, step
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=["efficientnet_b0"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    keep_graphs()
    results = []
    for name in args.models:
        results.append(probe(name))
        if args.out:   # after each model: an interrupted run keeps what it measured
            args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                            "results": results}, indent=1))


if __name__ == "__main__":
    main()
