"""Loss curves for benchmarks/models.py --loss-steps: copies of one model (stock, converted, and an fp32
reference when the run is not fp32) trained side by side from the same initial weights, on the same fixed
random batches and labels, with the same SGD, so the converted model's curve can be compared step by step
with stock's (issue 35: a converted model must lose as much as the stock one). The fp32 curve gives the size
of the drift that low precision alone causes.

Importing this module does no work (torch is imported inside the functions).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

LOSS_TOL = 0.02   # converted's final loss may exceed stock's by this fraction of stock's first loss
WINDOW = 10       # "final loss": the mean of the last WINDOW steps (one step's loss is noisy)
LR, MOMENTUM = 0.01, 0.9


def train_curve(model: Any, batches: list[tuple[Any, Any]], steps: int, loss_fn: Callable[[Any, Any], Any],
                lr: float = LR, momentum: float = MOMENTUM, autocast: Any = None) -> list[float]:
    """The loss of each of `steps` SGD steps (zero grads, forward, loss, backward, step) over `batches` in
    turn; with `autocast` (a dtype) the forward runs under torch.autocast (fp32 weights, low-precision
    math)."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    device_type = next(model.parameters()).device.type
    losses = []
    for step in range(steps):
        x, labels = batches[step % len(batches)]
        with torch.autocast(device_type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            out = model(x)
        loss = loss_fn(out, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach().float())
    return [float(v) for v in torch.stack(losses).cpu().tolist()]


def _final(curve: list[float], window: int) -> float:
    return statistics.fmean(curve[-window:])


def compare(curves: dict[str, list[float]], window: int = WINDOW, tol: float = LOSS_TOL) -> dict[str, Any]:
    """First, last and final (mean of the last `window`) loss of each curve; the largest step-wise gap of
    converted (and of stock, if there is an 'fp32' curve) to the others; and the verdict: converted's final
    loss is at most stock's + tol x stock's first loss."""
    stock, converted = curves["stock"], curves["converted"]
    window = max(1, min(window, len(stock)))
    out: dict[str, Any] = {
        "steps": len(stock), "window": window, "tolerance": tol,
        "first": {name: c[0] for name, c in curves.items()},
        "last": {name: c[-1] for name, c in curves.items()},
        "final": {name: _final(c, window) for name, c in curves.items()},
        "max_abs_diff": {"converted_vs_stock": max(abs(a - b) for a, b in zip(converted, stock))},
    }
    if "fp32" in curves:
        for name in ("stock", "converted"):
            gaps = (abs(a - b) for a, b in zip(curves[name], curves["fp32"]))
            out["max_abs_diff"][f"{name}_vs_fp32"] = max(gaps)
    final = out["final"]
    out["final_gap"] = final["converted"] - final["stock"]
    out["pass"] = bool(out["final_gap"] <= tol * stock[0])
    out["curves"] = {name: [round(v, 5) for v in c] for name, c in curves.items()}
    return out
