"""GPU: where the host time of a compiled training step goes, stock vs converted, without a profiler.

Under torch.compile(mode="reduce-overhead") a converted EfficientNet-B0 training step took 9.58 ms against
7.65 ms stock (synchronized steps, H200, stop 54, probe_graph_nodes_h200_stop54.json) while its two CUDA
graphs replayed alone in the same GPU time (6.11 against 6.18 ms) and launched in 12-18 us of host time each.
So the extra time is spent on the host between or around the graphs. Per variant this compiles the model
once and times, per step, the host time of zero_grad + forward (the forward graph's launch), the loss, and
backward (the backward graph's launch and AccumulateGrad), then the wait for the device; once with the steps
as benchmarks/models.py runs them, once with a device synchronization before backward (if backward's host
time then falls, the backward launch was waiting on queued device work, not computing). --bias-outside
adds the variant converted_bias_outside: the squeeze-excitation convs' bias outside the op under compile,
as before stop 55 (tools/probe_saved_inputs.bias_outside; on the CPU it adds 16 saved biases).

Usage (GPU):  python tools/probe_step_split.py [efficientnet_b0 ...] [--steps N] [--bias-outside] [--out F]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import models as bench  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_graph_nodes import tree_nodes  # noqa: E402
from probe_saved_inputs import bias_outside  # noqa: E402

WARMUP = 15
PARTS = ("forward", "loss", "backward", "wait")


def split_steps(runner: Any, model: Any, x: Any, labels: Any, steps: int, sync_before_backward: bool
                ) -> dict[str, float]:
    """Median host milliseconds of each part of `steps` synchronized training steps."""
    import torch

    times: dict[str, list[float]] = {part: [] for part in PARTS}
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.compiler.cudagraph_mark_step_begin()
        model.zero_grad(set_to_none=True)
        out = runner(x)
        t1 = time.perf_counter()
        loss = bench._loss(out, labels)
        if sync_before_backward:
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        t4 = time.perf_counter()
        for part, (a, b) in zip(PARTS, ((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
            times[part].append((b - a) * 1e3)
    row = {part: round(statistics.median(v), 3) for part, v in times.items()}
    row["step"] = round(sum(row[p] for p in PARTS), 3)
    return row


def graph_io() -> list[dict[str, int]]:
    """Per recorded cudagraph-tree node: its inputs and the outputs it rebuilds as tensors on each replay."""
    rows = []
    for node in tree_nodes():
        outputs = getattr(node, "outputs_weakrefs", None) or []
        rows.append({"inputs": len(getattr(node, "static_input_idxs", ()) or ()) +
                     len(getattr(node, "non_static_input_idx", ()) or ()),
                     "static_inputs": len(getattr(node, "static_input_idxs", ()) or ()),
                     "outputs": len(outputs), "output_tensors": sum(ref is not None for ref in outputs)})
    return rows


def probe_variant(spec: Any, s: Any, base: Any, variant: str, steps: int) -> dict[str, Any]:
    import torch

    start = time.perf_counter()
    prepared = "converted" if variant == "converted_bias_outside" else variant
    model, _ = bench._prepare(base, prepared, torch.device("cuda"), torch.bfloat16, spec.video)
    x, labels = bench._inputs(spec, s, torch.device("cuda"), torch.bfloat16, bench._num_classes(base))
    model.train()
    runner = torch.compile(model, mode="reduce-overhead")
    step = bench.make_step("train", runner, model, x, labels, True)
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    row: dict[str, Any] = {"first_s": round(time.perf_counter() - start, 1), "graphs": graph_io()}
    for label, sync in (("as_benchmarked", False), ("sync_before_backward", True), ("again", False)):
        row[label] = split_steps(runner, model, x, labels, steps, sync)
    print(json.dumps({variant: row}), flush=True)
    del runner, model, step
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=["efficientnet_b0"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--bias-outside", action="store_true", help="add the variant converted_bias_outside")
    parser.add_argument("--only", default=None, help="comma list: time only these variants")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import torch

    results = []
    for name in args.models:
        spec = next(m for m in bench.MODELS if m.name == name)
        s = bench.Settings(phases=("train",), modes=("compiled",))
        base, _ = bench.build(spec)
        result: dict[str, Any] = {"model": name}
        variants = (*bench.VARIANTS, *(("converted_bias_outside",) if args.bias_outside else ()))
        if args.only:
            variants = tuple(v for v in variants if v in args.only.split(","))
        for variant in variants:
            with bias_outside() if variant == "converted_bias_outside" else contextlib.nullcontext():
                result[variant] = probe_variant(spec, s, base, variant, args.steps)
            bench._reset_compiled()
        results.append(result)
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
