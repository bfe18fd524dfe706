"""td.conv_bwd_data: the input gradient dx of a strided grouped convolution, given dy and the weight.

A stride of 2 is computed by phase decomposition (no zero insertion). Checked against torch autograd in
float64.

    python examples/conv_backward_data.py
"""
import torch
import torch.nn.functional as F

import tiledispatch as td


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n, c, k, groups, size = (32, 128, 128, 8, 56) if device == "cuda" else (1, 8, 8, 2, 7)
    stride, padding = 2, 1
    x_shape = (n, c, size, size)
    w = torch.randn(k, c // groups, 3, 3, device=device, dtype=torch.float16)
    w = w.to(memory_format=torch.channels_last)
    out_size = (size + 2 * padding - 3) // stride + 1
    dy = torch.randn(n, k, out_size, out_size, device=device, dtype=torch.float16)
    dy = dy.to(memory_format=torch.channels_last)

    dx = td.conv_bwd_data(dy, w, x_shape, stride=stride, padding=padding, groups=groups)

    # float64 reference: the gradient autograd gives for x
    x64 = torch.zeros(x_shape, dtype=torch.float64, requires_grad=True)
    F.conv2d(x64, w.cpu().double(), None, stride, padding, 1, groups).backward(dy.cpu().double())
    ref = x64.grad
    err = ((dx.cpu().double() - ref).norm() / ref.norm()).item()
    print(f"td.conv_bwd_data N{n} C{c} K{k} G{groups} {size}x{size} 3x3 stride {stride} fp16 on {device}: "
          f"dx {tuple(dx.shape)}, relative error vs float64 {err:.2e}")
    assert err < 2e-3, err


if __name__ == "__main__":
    main()
