"""Does the order of compiled variants in one process change their timing? (GPU, issue 35)

`seq`: stock, converted, stock, converted, each compiled (reduce-overhead), warmed up, timed
(probe_compiled_step.split_times: synchronized steps as host and wait, back-to-back steps) and reset before
the next; `alt`: both compiled and alive, timed in alternating rounds (what benchmarks/models.py does now).
On an H200 the second stock of `seq` ran 1.83 ms per synchronized ConvNeXt-nano inference step against
1.66 ms for the first (probe_compiled_order_h200.json).

Usage (GPU):  python tools/probe_compiled_order.py OUT_DIR convnext_nano infer seq|alt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import models as bench  # noqa: E402
from probe_compiled_step import WARMUP, split_times  # noqa: E402  tools/probe_compiled_step.py


def make_step(name: str, phase: str, variant: str) -> Any:
    """A compiled (reduce-overhead), warmed-up step of the model, stock or converted (models.py's setup)."""
    import torch

    spec = next(m for m in bench.MODELS if m.name == name)
    base, _ = bench.build(spec)
    s = bench.Settings(phases=(phase,), modes=("compiled",))
    device = torch.device("cuda")
    model, _ = bench._prepare(base, variant, device, torch.bfloat16, spec.video)
    x, labels = bench._inputs(spec, s, device, torch.bfloat16, bench._num_classes(base))
    model.train() if phase == "train" else model.eval()
    step = bench.make_step(phase, torch.compile(model, mode="reduce-overhead"), model, x, labels, True)
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    return step


def main() -> None:
    import torch

    out, name, phase, how = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    torch.backends.cudnn.benchmark = True
    rows: list[dict[str, Any]] = []
    if how == "seq":
        for i, variant in enumerate(["stock", "converted", "stock", "converted"]):
            rows.append({"i": i, "variant": variant, **split_times(make_step(name, phase, variant), 40)})
            print(json.dumps(rows[-1]), flush=True)
            bench._reset_compiled()
    else:
        steps = {v: make_step(name, phase, v) for v in ("stock", "converted")}
        for rnd in range(6):
            for v in (("stock", "converted") if rnd % 2 == 0 else ("converted", "stock")):
                rows.append({"round": rnd, "variant": v, **split_times(steps[v], 20)})
                print(json.dumps(rows[-1]), flush=True)
    (out / f"order_{name}_{phase}_{how}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
