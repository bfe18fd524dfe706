"""GPU: where a converted conv layer's eager host time goes, with real launches.

For each layer: a fresh converted copy runs training calls until its LayerPlan settles (printed: what it
sampled and decided, in the order it sampled), then td's path is forced and td's and torch's layers run
interleaved blocks of training (forward + backward) and inference calls: host µs per call (enqueue time,
median of blocks; the layers are small, so the GPU keeps up), with --profile cProfile of td's training calls.

Usage:  python tools/probe_eager_gpu.py [--calls 100] [--blocks 7] [--profile] [--out PATH]
"""
from __future__ import annotations

import argparse
import cProfile
import copy
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

# (name, channels in, channels out, groups, kernel, size, batch)
LAYERS = (("dw3x3 128 28x28 n8", 128, 128, 128, 3, 28, 8),
          ("dw7x7 192 28x28 n8", 192, 192, 192, 7, 28, 8),
          ("3x3 64 56x56 n32", 64, 64, 1, 3, 56, 32))


def block_us(fn: Callable[[], object], calls: int) -> float:
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def probe(spec: tuple, opts: Any) -> dict[str, Any]:
    import torch

    import tiledispatch.nn as tdnn

    name, cin, cout, groups, k, size, n = spec
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False)
    ref = ref.to("cuda", torch.bfloat16, memory_format=torch.channels_last)
    conv = copy.deepcopy(ref)
    tdnn.convert(conv, step_check=False)
    x = torch.randn(n, cin, size, size, device="cuda", dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    grad = torch.randn(n, cout, size, size, device="cuda", dtype=torch.bfloat16)
    grad = grad.contiguous(memory_format=torch.channels_last)
    row: dict[str, Any] = {"layer": name}
    for step in range(60):
        conv(x).backward(grad)
        plans = list(conv._td_plans.values())
        if plans and plans[0].stage == "settled":
            row["settled_after_calls"] = step + 1
            break
    row["plan"] = [p.summary() for p in conv._td_plans.values()]
    for plan in conv._td_plans.values():    # force td's path from here on
        plan.stage, plan.on_torch = "settled", False
    conv._td_last = None

    def td_train() -> None:
        conv(x).backward(grad)

    def torch_train() -> None:
        ref(x).backward(grad)

    def td_infer() -> None:
        with torch.no_grad():
            conv(x)

    def torch_infer() -> None:
        with torch.no_grad():
            ref(x)

    arms = {"td_train": td_train, "torch_train": torch_train, "td_infer": td_infer,
            "torch_infer": torch_infer}
    for fn in arms.values():
        block_us(fn, 10)
    samples: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(opts.blocks):
        for arm, fn in arms.items():
            samples[arm].append(block_us(fn, opts.calls))
    row["host_us"] = {arm: round(statistics.median(v), 1) for arm, v in samples.items()}
    row["host_us_blocks"] = {arm: [round(s, 1) for s in v] for arm, v in samples.items()}
    if opts.profile:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(opts.calls * 3):
            td_train()
        profile.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
        row["profile"] = text.getvalue()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    import torch

    rows = []
    for spec in LAYERS:
        row = probe(spec, opts)
        print(json.dumps({k: v for k, v in row.items() if k != "profile"}, indent=1))
        if "profile" in row:
            print(row["profile"])
        rows.append(row)
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
