"""A/B of 16e4cee in one process: compiled training of an SE model, stock vs converted with size-1-stride
views (ops/layout.as_channels_last now) vs converted with the copies it replaced.

Stop 46 measured EfficientNet-B0's converted compiled step at 6.03 ms of GPU time (norm kernels 2.82 ms),
stop 47, after 16e4cee, at 6.32 ms (3.19 ms), stock at 5.95 ms in both; the runs were on different
machines. Here the three variants live together: each is warmed up alone (compiled, CUDA graphs recorded;
the copying variant with conv_ops' as_channels_last patched back to the copy while it records, so its
graphs hold the copies), then all are timed in alternating rounds (graph replays run no Python) and
profiled (every kernel kept). GPU only.

    python tools/probe_se_view.py [--model efficientnet_b0] [--steps 20] [--out PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

VARIANTS = ("stock", "converted_view", "converted_copy")


def copying(t: Any) -> Any:
    """as_channels_last before 16e4cee: t itself with the canonical strides, else a channels-last copy."""
    from tiledispatch.ops.layout import channels_last_strides, empty_channels_last

    if t.stride() == tuple(channels_last_strides(t.shape)):
        return t
    out = empty_channels_last(t.shape, t.dtype, t.device)
    out.copy_(t)
    return out


def warm(step: Any, device: Any, calls: int, copy: bool) -> float:
    """The first call's seconds, then calls - 1 more; conv_ops copies size-1-stride tensors when `copy`."""
    import model_measure as measure

    from tiledispatch.ops import conv_ops

    kept = conv_ops.as_channels_last
    conv_ops.as_channels_last = copying if copy else kept
    try:
        return measure.first_and_warm(step, device, calls)
    finally:
        conv_ops.as_channels_last = kept


def main(argv: list[str] | None = None) -> int:
    import model_measure as measure
    import models
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="efficientnet_b0")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "probe_se_view.json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    device, dtype = torch.device("cuda"), torch.bfloat16
    torch.backends.cudnn.benchmark = True
    spec = next(m for m in models.MODELS if m.name == args.model)
    torch.manual_seed(0)
    base, source = models.build(spec)
    s = models.Settings()
    x, labels = models._inputs(spec, s, device, dtype, models._num_classes(base))
    steps, first = {}, {}
    for variant in VARIANTS:
        model, _ = models._prepare(base, "stock" if variant == "stock" else "converted", device, dtype, False)
        model.train()
        runner = torch.compile(model, mode="reduce-overhead")
        steps[variant] = models.make_step("train", runner, model, x, labels, True)
        first[variant] = warm(steps[variant], device, args.warmup, variant == "converted_copy")
    timed = measure.interleaved_wall_times(steps, device, 1, args.steps)
    result: dict[str, Any] = {"model": args.model, "source": source, "gpu": torch.cuda.get_device_name(),
                              "torch": torch.__version__, "variants": {}}
    for variant, step in steps.items():
        result["variants"][variant] = {**timed[variant], "first_call_s": first[variant],
                                       **measure.gpu_time(step, device, 3, top=5000)}
        r = result["variants"][variant]
        print(f"{variant:15s} wall {r['wall_ms']:.2f} ms  GPU {r['gpu_ms']:.2f} ms  "
              + "  ".join(f"{k} {v:.2f}" for k, v in r["by_class_ms"].items()), flush=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
