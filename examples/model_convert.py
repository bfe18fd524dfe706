"""tiledispatch in a PyTorch model: convert a model's conv / linear layers in place, print what was taken and
what was left on torch, train a few steps next to the stock model, and compile it with fullgraph=True.

On a CUDA GPU: bf16, channels-last, compiled kernels. On the CPU every kernel runs on Triton's interpreter, so
the model is tiny and fp32 (the first call of each layer kind builds its default registry: minutes).

    python examples/model_convert.py
"""
import copy

import torch
from torch import nn

import tiledispatch.nn as tdnn


def make_model() -> nn.Sequential:
    """A small CNN: a strided stem, a grouped and a depthwise conv (each + BN + ReLU), a reflect-padded conv
    (left on torch), pooling and a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=4, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, padding_mode="reflect"),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def train(model: nn.Module, batches: list, steps: int) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, target = batches[step % len(batches)]
        loss = nn.functional.cross_entropy(model(x).float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss.item()


def main() -> None:
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    batch, size, steps = (32, 64, 20) if cuda else (2, 8, 2)
    torch.manual_seed(0)
    stock = make_model().to(device, dtype).to(memory_format=torch.channels_last)
    model = copy.deepcopy(stock)

    report = tdnn.convert(model)   # in place: same modules and Parameters, conv weights channels-last
    print(report)                  # layer / module / shape / runs on (tiledispatch, or torch and why)

    batches = [(torch.randn(batch, 3, size, size, device=device, dtype=dtype),
                torch.randint(0, 10, (batch,), device=device)) for _ in range(2)]
    with torch.no_grad():
        x = batches[0][0]
        err = float((model(x).float() - stock(x).float()).norm() / stock(x).float().norm())
    print(f"forward on {device} ({dtype}): relative difference to the stock model {err:.2e}")
    print(f"loss after {steps} steps: stock {train(stock, batches, steps):.4f}, "
          f"converted {train(model, batches, steps):.4f}")

    compiled = torch.compile(model, fullgraph=True)   # traced through the ops' fake kernels: no graph break
    with torch.no_grad():
        model.eval()
        err = float((compiled(x).float() - model(x).float()).norm() / model(x).float().norm())
    print(f"torch.compile(fullgraph=True): relative difference to eager {err:.2e}")


if __name__ == "__main__":   # default registries build in spawned worker processes: keep this guard
    main()
