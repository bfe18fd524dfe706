"""CPU: host time of a converted conv module's eager path without its kernels: after the first calls
(select and bind through the interpreter) every remembered decision's launch returns its first result, so a
call costs the Python path only (module, layer plan, autograd Function, td.conv* hit path). Prints the
decisions' kernels (their entries are the launches a GPU call adds) and, with --profile, cProfile of
training calls.

Usage:  python tools/probe_eager_host.py [--channels 16] [--size 8] [--calls 300] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any


def stub_launches() -> list[str]:
    """Replace every remembered td.gemm / td.conv* launch by its first result; the kernels' names."""
    from tiledispatch.dispatch import defaults

    names = []
    for memo in (defaults.GEMM.memo, defaults.CONV.memo):
        for decision in memo.values():
            cache: dict[str, Any] = {}

            def bound(*args: Any, _real: Callable = decision.bound, _cache: dict = cache) -> Any:
                if "out" not in _cache:
                    _cache["out"] = _real(*args)
                return _cache["out"]

            decision.bound = bound
            names.append(decision.selection.kernel.name)
    return names


def per_call_us(fn: Callable[[], object], calls: int, trials: int = 9) -> float:
    samples = []
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    opts = parser.parse_args()
    import torch

    import tiledispatch.nn as tdnn

    torch.manual_seed(0)
    torch.set_num_threads(1)
    c, size = opts.channels, opts.size
    layer = torch.nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False).to(memory_format=torch.channels_last)
    tdnn.convert(layer, step_check=False)
    x = torch.randn(1, c, size, size).contiguous(memory_format=torch.channels_last)
    leaf = x.detach().requires_grad_()
    grad = torch.randn(1, c, size, size).contiguous(memory_format=torch.channels_last)

    def infer() -> None:
        with torch.no_grad():
            layer(x)

    def train() -> None:
        layer(leaf).backward(grad)

    for _ in range(3):
        infer()
        train()
    for name in stub_launches():
        print("decision", name)
    for _ in range(20):
        infer()
        train()
    for plan in layer._td_plans.values():
        print("layer plan", plan.summary())
    print(f"host us per call without kernels: infer {per_call_us(infer, opts.calls):.1f}, "
          f"train (forward + backward) {per_call_us(train, opts.calls):.1f}")
    if opts.profile:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(10 * opts.calls):
            train()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
