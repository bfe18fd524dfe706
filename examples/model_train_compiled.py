"""Train a converted model under torch.compile(mode="reduce-overhead") next to the stock model.

tdnn.convert swaps the conv / linear layers in place and reports which it took; the compiled model replays
as CUDA graphs on a GPU (Inductor treats the custom ops as opaque kernels and compiles the code around them).
Both models start from the same weights and see the same batches, so their losses should stay close.

On a CUDA GPU: bf16, channels-last. On the CPU every kernel runs on Triton's interpreter: a tiny fp32 model,
a few steps, no CUDA graphs (the first call of each layer kind builds its default registry: minutes).

    python examples/model_train_compiled.py
"""
import copy

import torch
from torch import nn

import tiledispatch.nn as tdnn


def make_model() -> nn.Sequential:
    """A small CNN: strided stem, depthwise 3x3, pointwise 1x1 (each + BN + ReLU), pooling, linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def train(model: nn.Module, batches: list, steps: int) -> list[float]:
    """SGD steps of torch.compile(model, mode="reduce-overhead"); the loss of each step."""
    compiled = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        x, target = batches[step % len(batches)]
        torch.compiler.cudagraph_mark_step_begin()   # a new step: the last replay's outputs may be reused
        loss = nn.functional.cross_entropy(compiled(x).float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    batch, size, steps = (32, 64, 30) if cuda else (2, 8, 3)
    torch.manual_seed(0)
    stock = make_model().to(device, dtype).to(memory_format=torch.channels_last)
    model = copy.deepcopy(stock)

    report = tdnn.convert(model)   # in place: same modules and Parameters
    print(f"{len(report.taken)} layers on tiledispatch, {len(report.left)} left on torch")
    for layer in report.left:
        print(f"  {layer.name} ({layer.kind} {layer.shape}) stays on torch: {layer.reason}")

    batches = [(torch.randn(batch, 3, size, size, device=device, dtype=dtype)
                .contiguous(memory_format=torch.channels_last), torch.randint(0, 10, (batch,), device=device))
               for _ in range(2)]
    curves = {name: train(net, batches, steps) for name, net in (("stock", stock), ("converted", model))}
    for name, losses in curves.items():
        print(f"{name:9s} loss: first {losses[0]:.4f}, last {losses[-1]:.4f}")


if __name__ == "__main__":   # default registries build in spawned worker processes: keep this guard
    main()
