"""Measurements of whole-model steps for benchmarks/models.py: wall time per step, GPU time per step from the
profiler with each kernel classed (convolution / GEMM ours or the vendor's, normalization, elementwise,
reductions, layout copies), and numerics of a converted model against the stock one and an fp32 reference,
end to end and per layer.

Importing this module does no work (torch is imported inside the functions).
"""
from __future__ import annotations

import copy
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

# kernel classes, checked in this order (first match wins; see kernel_class)
TD_KERNEL = re.compile(r"^(conv|gemm)_\w*kernel")   # tiledispatch's Triton entries (conv_igemm_kernel ...)
_I = re.IGNORECASE
NORM = re.compile(r"batch_?norm|layer_?norm|group_?norm|native_norm|welford|bn_fw|bn_bw|_norm_", _I)
LAYOUT = re.compile(r"nchwtonhwc|nhwctonchw|copy|transpose|permute|memcpy|memset|catarray|cat_", _I)
VENDOR = re.compile(r"cudnn|cublas|cutlass|xmma|nvjet|gemm|conv|dgrad|wgrad|fprop|winograd|triton_tem_", _I)
ELEMENTWISE = re.compile(r"elementwise|unrolled|vectorized|fill|triton_poi", _I)
REDUCTION = re.compile(r"reduce|triton_red|triton_per|softmax|pool|sum|mean", _I)
CLASSES = ("tiledispatch", "vendor_conv_gemm", "norm", "elementwise", "reduction", "layout_copy", "other")


def kernel_class(name: str) -> str:
    """The class of a profiled GPU kernel by its name. Inductor's fused kernels (triton_poi / red / per_...)
    name the ops they fuse (e.g. ..._convolution_backward_...): they are normalization or elementwise /
    reduction work whatever they mention, never a convolution."""
    if TD_KERNEL.match(name):
        return "tiledispatch"
    low = name.lower()
    if low.startswith(("triton_poi", "triton_red", "triton_per")):
        return "norm" if NORM.search(low) else "elementwise" if low.startswith("triton_poi") else "reduction"
    for cls, pattern in (("norm", NORM), ("layout_copy", LAYOUT), ("vendor_conv_gemm", VENDOR),
                         ("elementwise", ELEMENTWISE), ("reduction", REDUCTION)):
        if pattern.search(low):
            return cls
    return "other"


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_times(fn: Callable[[], object], device: Any, warmup: int, steps: int, pipelined: bool = True
               ) -> dict[str, Any]:
    """fn's wall time per step: the first call alone (selection, registry builds, compilation), warm-up calls,
    then `steps` calls each synchronized (median, p20, p80) and, with `pipelined`, `steps` calls back to back
    (mean: the throughput a training loop without syncs sees) with the allocator / GC counters per step over
    those (_counters)."""
    first_s = first_and_warm(fn, device, warmup)
    samples = [_step_ms(fn, device) for _ in range(steps)]
    back = _counted_back_to_back(fn, device, steps) if pipelined else {"pipelined_ms": None}
    return {**_spread(samples), **back, "steps": steps, "first_call_s": first_s}


def first_and_warm(fn: Callable[[], object], device: Any, warmup: int) -> float:
    """Seconds of the first call alone (selection, builds, compilation), then warmup - 1 more calls."""
    start = time.perf_counter()
    fn()
    _sync(device)
    first_s = time.perf_counter() - start
    for _ in range(max(0, warmup - 1)):
        fn()
    _sync(device)
    return first_s


def run_until(fn: Callable[[], object], device: Any, done: Callable[[], bool], limit: int) -> dict[str, Any]:
    """Calls of fn (at least one) until done() holds or `limit` calls ran: {'steps', 'done'}. The models
    benchmark steps a converted eager model until its StepCheck has decided (stop 51, H200: X3D-M's check
    still ran its torch blocks in the timed steps after 70 warm-up steps)."""
    steps = 0
    while steps < max(1, limit):
        fn()
        steps += 1
        if done():
            break
    _sync(device)
    return {"steps": steps, "done": done()}


def _step_ms(fn: Callable[[], object], device: Any) -> float:
    """Wall milliseconds of one synchronized call."""
    start = time.perf_counter()
    fn()
    _sync(device)
    return (time.perf_counter() - start) * 1e3


def _back_to_back_ms(fn: Callable[[], object], device: Any, steps: int) -> float:
    """Mean wall milliseconds of `steps` calls without a sync between them."""
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    _sync(device)
    return (time.perf_counter() - start) * 1e3 / steps


_CUDA_COUNTERS = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams")


def _counters(device: Any) -> dict[str, int]:
    """Process counters a step's host time can hide in: the CUDA caching allocator's device mallocs, frees
    and out-of-memory retries (each synchronizes), and Python's garbage-collector runs per generation."""
    import gc

    import torch

    out = {f"gc_gen{i}": stats["collections"] for i, stats in enumerate(gc.get_stats())}
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        out.update({name: int(stats.get(name, 0)) for name in _CUDA_COUNTERS})
    return out


def _counted_back_to_back(fn: Callable[[], object], device: Any, steps: int) -> dict[str, Any]:
    """_back_to_back_ms, with the per-step change of _counters over those steps."""
    before = _counters(device)
    ms = _back_to_back_ms(fn, device, steps)
    after = _counters(device)
    return {"pipelined_ms": ms, "per_step_counters": {k: (after[k] - before[k]) / steps for k in after}}


def _spread(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"wall_ms": statistics.median(ordered), "wall_p20_ms": ordered[int(0.2 * (len(ordered) - 1))],
            "wall_p80_ms": ordered[int(0.8 * (len(ordered) - 1))]}


PIPELINED_ROUND_STEPS = 10   # a round's closing sync adds one step's latency, shared over this many steps


def interleaved_wall_times(fns: dict[str, Callable[[], object]], device: Any, warmup: int, steps: int,
                           rounds: int = 5, pipelined: bool = True) -> dict[str, dict[str, Any]]:
    """wall_times of several variants measured in alternation: each first called alone and warmed up, then
    `rounds` rounds of ceil(steps / rounds) synchronized steps of each variant in turn, so that a drift of the
    host's speed (10-30% between runs on the GPU hosts) hits every variant alike. Each round starts the turn
    one variant later (round_order), so no variant always follows the same one, and each variant's turn
    starts with one untimed step (the first step after another model's steps runs on caches that model
    filled; a training loop never switches). wall_ms is the median of all timed steps. With `pipelined`, as
    many rounds again of back-to-back steps of each variant in turn (at least PIPELINED_ROUND_STEPS per
    round): pipelined_ms is the median of the rounds' mean step times (pipelined_rounds_ms holds them)."""
    results: dict[str, dict[str, Any]] = {}
    for name, fn in fns.items():
        results[name] = {"first_call_s": first_and_warm(fn, device, warmup)}
    rounds = max(1, min(rounds, steps))
    per_round = -(-steps // rounds)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for index in range(rounds):
        for name in round_order(list(fns), index):
            fns[name]()
            _sync(device)
            samples[name] += [_step_ms(fns[name], device) for _ in range(per_round)]
    for name in fns:
        results[name].update({**_spread(samples[name]), "steps": len(samples[name]), "rounds": rounds,
                              "interleaved": list(fns)})
    if not pipelined:
        for result in results.values():
            result["pipelined_ms"] = None
        return results
    for name, back in _pipelined_rounds(fns, device, rounds, max(per_round, PIPELINED_ROUND_STEPS)).items():
        results[name].update(back)
    return results


def round_order(names: list[str], index: int) -> list[str]:
    """The variants' turn order in round `index`: the list rotated by `index`, so each variant leads a round
    in turn and none always runs right after the same other one."""
    shift = index % len(names)
    return names[shift:] + names[:shift]


def _pipelined_rounds(fns: dict[str, Callable[[], object]], device: Any, rounds: int, per_round: int
                      ) -> dict[str, dict[str, Any]]:
    """`rounds` rounds of `per_round` back-to-back steps of each variant in turn (_counted_back_to_back):
    the median round mean, the round means, and the per-step counter changes averaged over the rounds."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in fns}
    for index in range(rounds):
        for name in round_order(list(fns), index):
            runs[name].append(_counted_back_to_back(fns[name], device, per_round))
    out = {}
    for name, results in runs.items():
        means = [r["pipelined_ms"] for r in results]
        counters = {k: statistics.fmean(r["per_step_counters"][k] for r in results)
                    for k in results[0]["per_step_counters"]}
        out[name] = {"pipelined_ms": statistics.median(means), "pipelined_rounds_ms": means,
                     "per_step_counters": counters}
    return out


def gpu_time(fn: Callable[[], object], device: Any, steps: int, top: int = 8) -> dict[str, Any]:
    """GPU time per step: the summed time of every kernel (and memcpy / memset) the profiler records over
    `steps` calls, divided by steps; per kernel class, and the `top` kernels by time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    _sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        _sync(device)
    by_class = dict.fromkeys(CLASSES, 0.0)
    kernels = []
    for event in prof.key_averages():
        if event.device_type != DeviceType.CUDA:
            continue
        us = getattr(event, "self_device_time_total", None)
        if us is None:
            us = getattr(event, "self_cuda_time_total", 0.0)
        if not us:
            continue
        cls = kernel_class(event.key)
        by_class[cls] += us / 1e3 / steps
        kernels.append((us / 1e3 / steps, event.count // steps, cls, event.key[:140]))
    kernels.sort(reverse=True)
    total = sum(by_class.values())
    return {"gpu_ms": total if kernels else None, "by_class_ms": by_class,
            "conv_gemm_ms": by_class["tiledispatch"] + by_class["vendor_conv_gemm"],
            "kernels_per_step": sum(k[1] for k in kernels),
            "top_kernels": [{"ms": ms, "calls": calls, "class": cls, "name": name}
                            for ms, calls, cls, name in kernels[:top]]}


# -- numerics -----------------------------------------------------------------------------------------------
def rel_err(got: Any, want: Any) -> float:
    """||got - want|| / ||want|| in float64."""
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def deterministic_train(model: Any) -> Any:
    """model in training mode (batch statistics) with dropout and stochastic depth off: runs comparable."""
    import torch

    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd) or type(module).__name__ in (
                "DropPath", "StochasticDepth"):
            module.eval()
    return model


def _served_layers(model: Any) -> list[tuple[str, Any]]:
    """The conv / linear modules convert takes: exactly torch's classes."""
    import torch

    classes = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear)
    return [(name, m) for name, m in model.named_modules() if type(m) in classes]


def first_conv(model: Any) -> Any:
    """The model's first conv module (its stem), converted or not."""
    import torch

    return next(m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd))


def end_to_end(models: dict[str, Any], x: Any, labels: Any, loss_fn: Callable) -> dict[str, Any]:
    """Output and first-conv weight gradient of each model ('ref': fp32, 'stock', 'converted') on the same
    input, compared: stock and converted against the reference, converted against stock."""
    import torch

    results = {}
    for name, model in models.items():
        deterministic_train(model)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)   # functional dropout some models apply in training mode
        out = model(x.to(next(model.parameters()).dtype))
        loss_fn(out.float(), labels).backward()
        results[name] = (out.detach().float(), first_conv(model).weight.grad.detach().float())
        model.zero_grad(set_to_none=True)
    return {f"{name}_vs_{base}": {"output": rel_err(results[name][0], results[base][0]),
                                  "first_conv_dw": rel_err(results[name][1], results[base][1])}
            for name, base in (("stock", "ref"), ("converted", "ref"), ("converted", "stock"))
            if name in results and base in results}


def per_layer(stock: Any, x: Any, convert: Callable[[Any], Any], limit: float) -> dict[str, Any]:
    """Each distinct conv / linear layer of `stock` (by module configuration and input shape) on the input it
    sees in a forward pass: y, dx and dw of the converted layer and of the stock layer against the fp32 layer,
    for one random dy. Returns the worst errors, every layer's, and those above `limit`."""
    import torch

    rows: list[dict[str, Any]] = []
    seen: set = set()
    busy: list[str] = []   # set while a hook runs its layer copies (they carry the hook too)

    def check(name: str) -> Callable:
        def hook(module: Any, args: tuple, output: Any) -> None:
            key = (repr(module), tuple(args[0].shape))
            if busy or key in seen:
                return
            seen.add(key)
            busy.append(name)
            try:
                errors = _layer_errors(module, args[0], convert)
            finally:
                busy.clear()
            rows.append({"layer": name, "module": repr(module)[:120], "input_shape": list(args[0].shape),
                         **errors})
        return hook

    handles = [m.register_forward_hook(check(n)) for n, m in _served_layers(stock)]
    try:
        deterministic_train(stock)
        with torch.no_grad():
            stock(x.to(next(stock.parameters()).dtype))
    finally:
        for handle in handles:
            handle.remove()
    worst = {key: max((r["converted"][key] for r in rows), default=None) for key in ("y", "dx", "dw")}
    over = [r["layer"] for r in rows if max(r["converted"].values()) > limit]
    worst_stock = {key: max((r["stock"][key] for r in rows), default=None) for key in ("y", "dx", "dw")}
    return {"layers": len(rows), "limit": limit, "worst": worst, "worst_stock": worst_stock,
            "over_limit": over, "rows": rows}


def _layer_errors(module: Any, x: Any, convert: Callable[[Any], Any]) -> dict[str, Any]:
    """y, dx, dw of the converted and of the stock layer against the fp32 layer, for one random dy."""
    import torch

    ref = copy.deepcopy(module).float()
    converted = copy.deepcopy(module)
    convert(converted)
    results = {}
    with torch.enable_grad():
        dy = None
        for name, layer in (("ref", ref), ("stock", module), ("converted", converted)):
            weight = layer.weight
            inp = x.detach().to(weight.dtype).requires_grad_()
            out = layer(inp)
            if dy is None:
                gen = torch.Generator(out.device).manual_seed(0)
                dy = torch.randn(out.shape, device=out.device, generator=gen)
            dx, dw = torch.autograd.grad(out, (inp, weight), dy.to(out.dtype))
            results[name] = (out.detach(), dx, dw)
    keys = ("y", "dx", "dw")
    return {name: {key: rel_err(results[name][i], results["ref"][i]) for i, key in enumerate(keys)}
            for name in ("stock", "converted")}
