"""Convolution dispatch overhead: the host-side cost per call of td.conv* and Kernel.launch against the bound
launch of the same selected instance (ConvBound, every argument bound once) and torch's cuDNN call.

Protocol: the timing of benchmarks/dispatch_overhead.py (per variant, `--calls` calls in a loop then
torch.cuda.synchronize(); wall time / calls; median of `--trials` trials after a warm-up trial; `issue_us` the
loop alone, started after a sync, `--issue-calls` calls). Small layers of the conv suites, where the GPU work is
a few microseconds and the host's share shows. Outputs are checked against the benchmark's fp32 reference before
timing. overhead = variant - bound (per call). td.conv* run their default registry (`auto`), Kernel.launch and
the bound launch that registry's pick.

Usage (GPU):  python benchmarks/conv_overhead.py [--calls 2000] [--trials 7]
                  [--out benchmarks/results/conv_overhead_<gpu-slug>.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conv as bench  # noqa: E402  (benchmarks/conv.py: inputs, cuDNN calls, reference)
import dispatch_overhead as timing  # noqa: E402  (per_call_us, issue_us, header fields)

ROOT = Path(__file__).resolve().parents[1]
# (model/layer, direction): depthwise 3x3 on 7x7 pixels (two launches), a 1x1 on 7x7 pixels (one GEMM launch)
LAYERS = (("mobilenet_v2/stage5.1.dw", "fwd"), ("mobilenet_v2/stage5.1.dw", "bwd_data"),
          ("mobilenet_v2/stage5.1.dw", "bwd_weight"), ("resnet50/layer4.1.conv1", "fwd"))
VARIANTS = ("bound", "kernel_launch", "td_api", "torch")
DISPATCH = ("kernel_launch", "td_api")   # compared with `bound`


def api_call(problem: Any, args: Any) -> Any:
    """td.conv / conv_bwd_data / conv_bwd_weight writing into the preallocated output."""
    import tiledispatch as td

    geometry = {"stride": problem.stride, "padding": problem.padding, "dilation": problem.dilation,
                "groups": problem.groups}
    if problem.direction == "fwd":
        return lambda: td.conv(args.x, args.w, out=args.y, **geometry)
    if problem.direction == "bwd_data":
        return lambda: td.conv_bwd_data(args.y, args.w, tuple(args.x.shape), out=args.x, **geometry)
    return lambda: td.conv_bwd_weight(args.x, args.y, tuple(args.w.shape), out=args.w, **geometry)


def measure_layer(case: Any, direction: str, opts: argparse.Namespace) -> dict[str, Any]:
    import torch

    from tiledispatch.api import default_conv_registry
    from tiledispatch.kernels.conv_common import OUTPUT_ROLE
    from tiledispatch.registry.kernel import prepare

    problem = case.for_direction(direction)
    args = bench.make_args(problem, torch.device("cuda"), seed=0)
    problem = prepare(problem, args)
    kernel = default_conv_registry(problem).select(problem, "auto").kernel
    bound = kernel.bound_launch(args, problem)
    fns = {"bound": lambda: bound(args.x, args.w, args.y, args.bias),
           "kernel_launch": lambda: kernel.launch(args, problem),
           "td_api": api_call(problem, args),
           "torch": bench.torch_call(problem, args.x, args.w, args.y)}
    ref = bench.reference(problem, args)
    written = OUTPUT_ROLE[direction]
    errors = {}
    for name, fn in fns.items():
        getattr(args, written).fill_(float("nan"))
        result = fn()
        errors[name] = bench.rel_err(getattr(args, written) if result is None else result, ref)
    sync = torch.cuda.synchronize
    row = {"layer": f"{case.model}/{case.layer}", "direction": direction, "kernel": kernel.name,
           "launches": len(bound.entries), "rel_err": errors,
           "valid": all(err <= bench.TOLERANCE[problem.dtype] for err in errors.values()),
           "per_call_us": {name: timing.per_call_us(fn, opts.calls, opts.trials, sync) for name, fn in fns.items()},
           "issue_us": {name: timing.issue_us(fn, opts.issue_calls, opts.trials, sync) for name, fn in fns.items()}}
    row["overhead_us"] = {v: row["per_call_us"][v] - row["per_call_us"]["bound"] for v in DISPATCH}
    row["issue_overhead_us"] = {v: row["issue_us"][v] - row["issue_us"]["bound"] for v in DISPATCH}
    return row


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
    parser.add_argument("--issue-calls", type=int, default=200, help="calls per issue-only loop")
    parser.add_argument("--trials", type=int, default=7, help="timed trials per variant, median reported")
    parser.add_argument("--out", help="JSON path (default benchmarks/results/conv_overhead_<gpu-slug>.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import torch

    from tiledispatch.problems.conv_suites import all_cases

    opts = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible: run on a GPU machine")
    opts.smoke = False
    result = timing.header(opts)
    result.update({"benchmark": "conv_overhead", "preset": "conv_<direction>_bf16_2d_essential",
                   "protocol": __doc__.split("\n\n")[1].replace("\n", " ").removeprefix("Protocol: "),
                   "dtype": "bf16"})
    result.pop("limit_us", None)
    result.pop("graph_calls", None)
    cases = {f"{c.model}/{c.layer}": c for c in all_cases()}
    result["rows"] = []
    for name, direction in LAYERS:
        row = measure_layer(cases[name], direction, opts)
        result["rows"].append(row)
        us = row["per_call_us"]
        print(f"{name} {direction}: " + ", ".join(f"{v} {us[v]:.1f} us" for v in VARIANTS), flush=True)
    out = Path(opts.out) if opts.out else (ROOT / "benchmarks" / "results"
                                           / f"conv_overhead_{timing.gpu_slug(result['gpu'])}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0 if all(row["valid"] for row in result["rows"]) else 1


if __name__ == "__main__":   # Registry.build spawns workers, which re-import this file
    sys.exit(main())
