"""--vendor-off-gpu of benchmarks/models.py: after a model's eager measurement, the time per step of a fresh
converted copy running our kernels only: TILEDISPATCH_VENDOR=0 (no cuBLAS / cuDNN plan in selection) and no
StepCheck (which would hand layers back to torch). The default registries are set aside for it (fresh ones,
with a private tuning DB, so no vendor-less winner outlives the measurement) and put back afterwards.
Recorded as runs[phase]["converted_novendor_eager"] (gpu_ms, by_class_ms; None on CPU).

Importing this module does no work.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

KEY = "converted_novendor_eager"


@contextlib.contextmanager
def vendor_off(reinstall: Callable[[], None] | None = None) -> Iterator[None]:
    """Vendor plans off, fresh default registries (built on first use, or by `reinstall`) on a private tuning
    DB; on exit the environment, the registries and their decisions are what they were."""
    from tiledispatch.dispatch import defaults

    kept = defaults.registries()
    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {
            "TILEDISPATCH_VENDOR": "0", "TILEDISPATCH_TUNING_DB": os.path.join(tmp, "tuning.json")}):
        defaults.reset()
        try:
            if reinstall is not None:
                reinstall()
            yield
        finally:
            defaults.reset()
            for key, registry in kept.items():
                defaults.install(key, registry)


def measure(row: dict[str, Any], model: Any, inputs: tuple[Any, Any], phases: tuple[str, ...], s: Any,
            make_step: Callable[..., Any], timing: Any, reinstall: Callable[[], None] | None = None) -> None:
    """Time `model` (stock, on the device) converted with vendor plans off, per phase, into
    row['runs'][phase][KEY]; `timing` is benchmarks/model_measure (wall_times, gpu_time)."""
    import torch

    import tiledispatch.nn as tdnn

    device = torch.device(s.device)
    x, labels = inputs
    with vendor_off(reinstall):
        tdnn.convert(model, step_check=False)
        for phase in phases:
            started = time.perf_counter()
            model.train() if phase == "train" else model.eval()
            step = make_step(phase, model, model, x, labels, False)
            result = timing.wall_times(step, device, s.warmup, s.steps, s.pipelined)
            cuda = device.type == "cuda"
            result.update(timing.gpu_time(step, device, s.profile_steps, s.top_kernels) if cuda
                          else {"gpu_ms": None, "by_class_ms": None})
            result["seconds"] = time.perf_counter() - started
            row["runs"].setdefault(phase, {})[KEY] = result
            gpu = result["gpu_ms"]
            print(f"  {phase:5s} {KEY:18s} {result['wall_ms']:8.2f} ms wall"
                  + (f", {gpu:8.2f} ms GPU" if gpu else ""), flush=True)
