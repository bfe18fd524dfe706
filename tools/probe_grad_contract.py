"""Which parameters' gradients AccumulateGrad copies instead of taking, stock vs converted.

With `.grad` None, torch's AccumulateGrad takes the incoming gradient as `.grad` when its strides match the
parameter's in every dim of size > 1 (no stride 0) and nothing else holds it; otherwise it copies it (one
kernel and one allocation per parameter per step). A hook on each parameter records the incoming
gradient's address; after the backward, a `.grad` at another address was copied. Runs one training step
(forward, backward, grads set to None first) of a model eager or compiled, stock and converted.

Usage:  python tools/probe_grad_contract.py [--model efficientnet_b0] [--compile reduce-overhead|aot_eager]
        [--device cuda] [--size 224] [--batch 8]
CPU (a small model on the interpreter):  python tools/probe_grad_contract.py --model smoke --device cpu
"""
from __future__ import annotations

import argparse
import copy
import json
from typing import Any


def smoke_model() -> Any:
    import torch

    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, groups=8),
                         nn.Conv2d(8, 16, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def build(name: str) -> Any:
    if name == "smoke":
        return smoke_model()
    import timm

    return timm.create_model(name, pretrained=False)


def copied(model: Any, step: Any, steps: int) -> dict[str, Any]:
    """Run `steps` steps; per parameter, whether the last step's .grad is the incoming gradient."""
    incoming: dict[str, tuple] = {}
    handles = []
    for name, p in model.named_parameters():
        def hook(g: Any, _name: str = name) -> None:
            incoming[_name] = (g.data_ptr(), tuple(g.stride()))
        handles.append(p.register_hook(hook))
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        step()
    out = []
    for name, p in model.named_parameters():
        if p.grad is None or name not in incoming:
            continue
        ptr, stride = incoming[name]
        if p.grad.data_ptr() != ptr:
            out.append({"param": name, "shape": list(p.shape), "param_stride": list(p.stride()),
                        "grad_stride": list(stride)})
    for h in handles:
        h.remove()
    return {"params": sum(1 for _ in model.parameters()), "copied": len(out), "which": out[:40]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="efficientnet_b0")
    parser.add_argument("--compile", default="", help="torch.compile mode or backend ('' = eager)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    import torch

    import tiledispatch.nn as tdnn

    torch.manual_seed(0)
    cuda = opts.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    base = build(opts.model).to(opts.device, dtype, memory_format=torch.channels_last)
    x = torch.randn(opts.batch, 3, opts.size, opts.size, device=opts.device, dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    result: dict[str, Any] = {"model": opts.model, "compile": opts.compile, "device": opts.device}
    for variant in ("stock", "converted"):
        model = copy.deepcopy(base)
        if variant == "converted":
            tdnn.convert(model, step_check=False)
        run = model
        if opts.compile in ("default", "reduce-overhead", "max-autotune"):
            run = torch.compile(model, mode=opts.compile)
        elif opts.compile:
            run = torch.compile(model, backend=opts.compile)

        def step(_run: Any = run) -> None:
            _run(x).float().sum().backward()

        result[variant] = copied(model, step, opts.steps)
        print(variant, json.dumps(result[variant])[:2000])
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
