"""td.conv_bwd_weight: the weight gradient dw of a depthwise, dilated convolution, given x and dy.

The reduction runs over N x output pixels, split into an fp32 workspace and reduced deterministically.
Checked against torch autograd in float64.

    python examples/conv_backward_weight.py
"""
import torch
import torch.nn.functional as F

import tiledispatch as td


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n, channels, size = (32, 384, 28) if device == "cuda" else (2, 8, 6)
    dilation, padding = 2, 2
    w_shape = (channels, 1, 3, 3)        # depthwise: groups == channels, one channel per group
    x = torch.randn(n, channels, size, size, device=device, dtype=torch.float16)
    x = x.to(memory_format=torch.channels_last)
    dy = torch.randn(n, channels, size, size, device=device, dtype=torch.float16)   # "same" output size
    dy = dy.to(memory_format=torch.channels_last)

    dw = td.conv_bwd_weight(x, dy, w_shape, padding=padding, dilation=dilation, groups=channels)

    w64 = torch.zeros(w_shape, dtype=torch.float64, requires_grad=True)
    F.conv2d(x.cpu().double(), w64, None, 1, padding, dilation, channels).backward(dy.cpu().double())
    ref = w64.grad
    err = ((dw.cpu().double() - ref).norm() / ref.norm()).item()
    print(f"td.conv_bwd_weight depthwise N{n} C{channels} {size}x{size} 3x3 dilation {dilation} fp16 on "
          f"{device}: dw {tuple(dw.shape)}, relative error vs float64 {err:.2e}")
    assert err < 2e-3, err


if __name__ == "__main__":
    main()
