"""CPU: which values a compiled training step's forward graph saves for backward, stock vs converted.

Under torch.compile(mode="reduce-overhead") every value the forward graph returns is rebuilt or checked on
each replay, and each saved value is an input of the backward graph. The converted EfficientNet-B0's
forward graph returned 31 more values than stock's on an H200 (tools/probe_step_split.py). This captures
both variants' forward graphs with aot_autograd and Inductor's min-cut partitioner (fake tensors: nothing
runs), counts their outputs by producer, and lists the graph inputs (parameters) that only the converted
graph saves, with their shapes. --bias-outside adds a third variant: converted, with the bias of each
conv on a 1x1 input (squeeze-excitation) outside the op under compile, as before stop 55 (`bias_outside`;
docs/design/nn_compiled.md, Stop 54). Needs timm.

    python tools/probe_saved_inputs.py [efficientnet_b0] [--size 64] [--bias-outside]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
from collections.abc import Iterator
from collections import Counter
from typing import Any


class Captured(Exception):
    """Raised by the forward compiler once it holds the graph: the step never runs."""


@contextlib.contextmanager
def bias_outside() -> Iterator[None]:
    """Within: every converted conv adds its bias outside the op under compile, also on a 1x1 input
    (squeeze-excitation), as before stop 55 (nn/modules._bias_outside); a patch of this process only."""
    from tiledispatch.nn import modules

    original = modules._bias_outside
    modules._bias_outside = lambda input, spatial: True
    try:
        yield
    finally:
        modules._bias_outside = original


def forward_graph(model: Any, x: Any) -> Any:
    """The forward graph aot_autograd partitions out of one training step of `model` on `x`."""
    import torch
    from functorch.compile import min_cut_rematerialization_partition
    from torch._functorch.aot_autograd import aot_module_simplified

    got: dict[str, Any] = {}

    def keep(gm: Any, example: Any) -> Any:
        got.setdefault("forward", gm)
        raise Captured()

    def backend(gm: Any, example: Any) -> Any:
        return aot_module_simplified(gm, example, fw_compiler=keep, bw_compiler=keep,
                                     partition_fn=min_cut_rematerialization_partition)

    try:
        torch.compile(model, backend=backend, fullgraph=True)(x).sum().backward()
    except Exception as exc:  # noqa: BLE001 - Dynamo wraps the compiler's exception; only ours is expected
        if "Captured" not in repr(exc):
            raise
    torch._dynamo.reset()
    return got["forward"]


def outputs(gm: Any) -> dict[str, Any]:
    """The forward graph's outputs by producer ('input': a graph input saved as it is), and the shapes of
    the saved inputs by placeholder name."""
    import torch

    inputs = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    returned = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    kinds: Counter[str] = Counter()
    saved: dict[str, list[int]] = {}
    for value in returned:
        if not hasattr(value, "op"):
            kinds[type(value).__name__] += 1
        elif value.name in inputs:
            kinds["input"] += 1
            meta = value.meta.get("val")
            saved[value.name] = list(meta.shape) if isinstance(meta, torch.Tensor) else []
        else:
            kinds[getattr(value.target, "__name__", str(value.target))] += 1
    return {"inputs": len(inputs), "outputs": len(returned), "by_producer": dict(kinds), "saved": saved}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default="efficientnet_b0")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--bias-outside", action="store_true", help="add the variant converted_bias_outside")
    args = parser.parse_args()
    import timm
    import torch

    import tiledispatch.nn as tdnn

    torch.manual_seed(0)
    base = timm.create_model(args.model, pretrained=False).to(torch.bfloat16)
    base = base.to(memory_format=torch.channels_last).train()
    x = torch.randn(2, 3, args.size, args.size, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    rows = {}
    for variant in ("stock", "converted", "converted_bias_outside")[:3 if args.bias_outside else 2]:
        model = copy.deepcopy(base)
        if variant != "stock":
            tdnn.convert(model)
        with bias_outside() if variant == "converted_bias_outside" else contextlib.nullcontext():
            rows[variant] = outputs(forward_graph(model, x))
    stock, ours = rows["stock"], rows["converted"]
    only_ours = {name: shape for name, shape in ours["saved"].items() if name not in stock["saved"]}
    report = {"model": args.model, "size": args.size,
              **{v: {k: r[k] for k in ("inputs", "outputs", "by_producer")} for v, r in rows.items()},
              "saved_only_by_converted": only_ours}
    if args.bias_outside:
        report["saved_only_by_converted_bias_outside"] = {
            name: shape for name, shape in rows["converted_bias_outside"]["saved"].items()
            if name not in stock["saved"]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
