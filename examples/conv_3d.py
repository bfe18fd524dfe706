"""3-D convolutions (video networks): a grouped forward with asymmetric padding, then its input gradient.

Tensors are torch channels_last_3d (NDHWC in memory). Padding is one (left, right) pair per dim, as a
"same"-padded even-sized filter needs. Checked against torch in float64.

    python examples/conv_3d.py
"""
import torch
import torch.nn.functional as F

import tiledispatch as td


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device == "cuda"
    n, c, k, groups, (d, h, w_) = (8, 192, 192, 12, (16, 28, 28)) if gpu else (1, 8, 8, 2, (3, 4, 5))
    padding = ((1, 0), (1, 1), (0, 1))               # (left, right) for depth, height, width
    cl3d = torch.channels_last_3d
    x = torch.randn(n, c, d, h, w_, device=device, dtype=torch.float16).to(memory_format=cl3d)
    w = torch.randn(k, c // groups, 2, 3, 2, device=device, dtype=torch.float16).to(memory_format=cl3d)

    y = td.conv(x, w, padding=padding, groups=groups)

    pads = [p for pair in reversed(padding) for p in pair]   # F.pad takes the last dim first
    x64, w64 = x.cpu().double(), w.cpu().double()
    ref = F.conv3d(F.pad(x64, pads), w64, None, 1, 0, 1, groups)
    err = ((y.cpu().double() - ref).norm() / ref.norm()).item()
    print(f"td.conv 3-D N{n} C{c} K{k} G{groups} {d}x{h}x{w_} filter 2x3x2 padding {padding} on {device}: "
          f"y {tuple(y.shape)}, relative error vs float64 {err:.2e}")
    assert err < 2e-3, err

    # The input gradient of the same convolution, given an output gradient dy.
    dy = torch.randn(y.shape, device=device, dtype=torch.float16).to(memory_format=cl3d)
    dx = td.conv_bwd_data(dy, w, x.shape, padding=padding, groups=groups)
    x_grad = torch.zeros(x.shape, dtype=torch.float64, requires_grad=True)
    F.conv3d(F.pad(x_grad, pads), w64, None, 1, 0, 1, groups).backward(dy.cpu().double())
    err = ((dx.cpu().double() - x_grad.grad).norm() / x_grad.grad.norm()).item()
    print(f"td.conv_bwd_data 3-D: dx {tuple(dx.shape)}, relative error vs float64 {err:.2e}")
    assert err < 2e-3, err


if __name__ == "__main__":
    main()
