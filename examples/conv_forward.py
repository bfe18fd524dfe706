"""td.conv: a grouped 3x3 convolution with a fused bias and ReLU, on channels-last torch tensors.

Compiled kernels on a CUDA GPU, Triton's interpreter on CPU tensors (with a tiny problem). The first call
builds the default registry of the problem's direction, dtype and ndim (preset conv_fwd_fp16_2d_essential)
into the cache ($TILEDISPATCH_CACHE_DIR, default ~/.cache/tiledispatch); later runs load it from there.

    python examples/conv_forward.py
"""
import torch
import torch.nn.functional as F

import tiledispatch as td


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # ResNeXt-like layer on a GPU; on the CPU every program runs in Python, so keep it tiny.
    n, c, k, groups, size = (32, 256, 256, 32, 56) if device == "cuda" else (2, 16, 16, 4, 6)
    cl = torch.channels_last
    x = torch.randn(n, c, size, size, device=device, dtype=torch.float16).to(memory_format=cl)
    w = torch.randn(k, c // groups, 3, 3, device=device, dtype=torch.float16).to(memory_format=cl)
    bias = torch.randn(k, device=device, dtype=torch.float16)

    y = td.conv(x, w, bias, stride=1, padding=1, groups=groups, activation="relu")

    ref = F.relu(F.conv2d(x.cpu().double(), w.cpu().double(), bias.cpu().double(), 1, 1, 1, groups))
    err = ((y.cpu().double() - ref).norm() / ref.norm()).item()
    backend = f"compiled, {torch.cuda.get_device_name()}" if device == "cuda" else "Triton interpreter"
    print(f"td.conv N{n} C{c} K{k} G{groups} {size}x{size} 3x3 fp16 + bias + relu on {device} ({backend}): "
          f"y {tuple(y.shape)}, channels-last {y.is_contiguous(memory_format=torch.channels_last)}, "
          f"relative error vs float64 {err:.2e}")
    assert err < 2e-3, err

    # The same problem as a ConvProblem: its size, and the kernel the default registry selects for it.
    problem = td.ConvProblem("fwd", n, c, k, groups, (size, size), (3, 3), padding=1, dtype="fp16", bias=True,
                             activation="relu")
    selection = td.api.default_conv_registry(problem).select(problem)
    print(f"{problem.describe()}: output {problem.output}, {problem.flops / 1e9:.3g} GFLOP, "
          f"{problem.min_bytes / 1e6:.3g} MB at least")
    print(f"selected {selection.kernel.name} (strategy: {selection.strategy})")


if __name__ == "__main__":
    main()
