"""Host time per call of tiledispatch.nn's modules against torch's own, eager, on one GPU.

Per layer and phase (infer: forward under no_grad; train: forward + backward from a stored gradient, input
and parameters requiring grad), a torch module and its tiledispatch.nn.convert-ed copy (same weights, bf16
channels-last) are timed as dispatch_overhead.py times calls: `issue_us` is the loop alone (host time per
call, fewer calls than the launch queue holds), `per_call_us` the loop plus a final sync. Issue 35's limit:
converted issue_us <= torch's + 3 us on every row. Outputs are checked against the torch module first.

Usage (GPU):  python benchmarks/module_overhead.py [--calls 1000] [--issue-calls 200] [--trials 7]
                  [--out PATH]
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from dispatch_overhead import issue_us, per_call_us
from protocol import environment, gpu_slug

ROOT = Path(__file__).resolve().parents[1]
LIMIT_US = 3.0
TOLERANCE = 2e-2
# (name, module constructor, per-sample input shape, batch)
LAYERS = (
    ("conv2d 3x3 64->64 14x14 n1", ("Conv2d", (64, 64, 3), {"padding": 1}), (64, 14, 14), 1),
    ("conv2d 3x3 64->64 56x56 n32", ("Conv2d", (64, 64, 3), {"padding": 1}), (64, 56, 56), 32),
    ("conv2d 1x1 256->64 14x14 n1 bias", ("Conv2d", (256, 64, 1), {}), (256, 14, 14), 1),
    ("conv2d dw3x3 128 28x28 n8", ("Conv2d", (128, 128, 3), {"padding": 1, "groups": 128, "bias": False}),
     (128, 28, 28), 8),
    ("conv3d 3x3x3 32->32 4x14x14 n1", ("Conv3d", (32, 32, 3), {"padding": 1, "bias": False}),
     (32, 4, 14, 14), 1),
    ("linear 1024->1024 m8", ("Linear", (1024, 1024), {}), (1024,), 8),
)


def build(layer: tuple) -> tuple[Any, Any, Any]:
    """(torch module, converted copy, input) in bf16, channels-last where the input has spatial dims."""
    import torch

    import tiledispatch.nn as tdnn

    _, (cls, args, kwargs), sample, batch = layer
    torch.manual_seed(0)
    stock = getattr(torch.nn, cls)(*args, **kwargs).cuda().to(torch.bfloat16)
    x = torch.randn(batch, *sample, device="cuda", dtype=torch.bfloat16)
    if x.dim() == 4:
        stock = stock.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    elif x.dim() == 5:
        stock = stock.to(memory_format=torch.channels_last_3d)
        x = x.contiguous(memory_format=torch.channels_last_3d)
    ours = copy.deepcopy(stock)
    report = tdnn.convert(ours)
    if report.left:
        raise RuntimeError(f"{layer[0]}: convert left a layer on torch: {report.left}")
    return stock, ours, x


def calls(module: Any, x: Any, grad: Any, phase: str) -> Any:
    import torch

    if phase == "infer":
        def infer() -> Any:
            with torch.no_grad():
                return module(x)
        return infer
    leaf = x.detach().requires_grad_()

    def train() -> Any:
        y = module(leaf)
        y.backward(grad)
        return y
    return train


def measure(layer: tuple, opts: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    stock, ours, x = build(layer)
    with torch.no_grad():
        ref, got = stock(x), ours(x)
    err = float((got.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))
    grad = torch.randn_like(ref)
    rows = []
    for phase in ("infer", "train"):
        fns = {"torch": calls(stock, x, grad, phase), "converted": calls(ours, x, grad, phase)}
        row: dict[str, Any] = {"layer": layer[0], "phase": phase, "rel_err": err, "valid": err < TOLERANCE}
        for name, fn in fns.items():
            fn()   # first call: selection (and measuring) on ours, cuDNN's heuristics on torch
        row["issue_us"] = {n: issue_us(f, opts.issue_calls, opts.trials, torch.cuda.synchronize)
                           for n, f in fns.items()}
        row["per_call_us"] = {n: per_call_us(f, opts.calls, opts.trials, torch.cuda.synchronize)
                              for n, f in fns.items()}
        row["extra_us"] = row["issue_us"]["converted"] - row["issue_us"]["torch"]
        row["layer_plans"] = [plan.summary() for plan in getattr(ours, "_td_plans", {}).values()]
        row["pass"] = row["valid"] and row["extra_us"] <= LIMIT_US
        rows.append(row)
        print(f"{layer[0]:36s} {phase:5s} host us torch {row['issue_us']['torch']:7.2f} converted "
              f"{row['issue_us']['converted']:7.2f} (+{row['extra_us']:.2f})  per call torch "
              f"{row['per_call_us']['torch']:8.2f} converted {row['per_call_us']['converted']:8.2f}",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--issue-calls", type=int, default=200)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args(argv)
    import torch

    env = environment(torch.device("cuda"))
    result: dict[str, Any] = {"benchmark": "module_overhead", **env, "limit_us": LIMIT_US,
                              "calls": opts.calls, "issue_calls": opts.issue_calls, "trials": opts.trials,
                              "rows": []}
    torch.backends.cudnn.benchmark = False
    for layer in LAYERS:
        result["rows"].extend(measure(layer, opts))
    result["pass"] = all(row["pass"] for row in result["rows"])
    out = opts.out or ROOT / "benchmarks" / "results" / f"module_overhead_{gpu_slug(env['gpu'])}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"pass: {result['pass']}  -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
