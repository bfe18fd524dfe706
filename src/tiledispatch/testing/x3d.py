"""X3D-M (Feichtenhofer, "X3D: Expanding Architectures for Efficient Video Recognition", CVPR 2020) as a plain
torch module, written from the paper's layer table; no weights. Benchmarks and the model-zoo layer checks use
it as the project's 3-D depthwise video net (torchvision has no X3D).

X3D-M: 16 x 224 x 224 clips; stem 1x3x3 conv (stride 1x2x2) then a 5x1x1 channel-wise temporal conv, 24
channels; four stages of 3 / 5 / 11 / 7 bottleneck blocks, widths 24 / 48 / 96 / 192, inner width 2.25x,
3x3x3 channel-wise convs (spatial stride 2 in each stage's first block), squeeze-excitation (ratio 1/16) in
every other block, swish after the channel-wise conv, ReLU elsewhere; head: 1x1x1 conv to 432, global average
pool, 1x1x1 conv to 2048, dropout and a linear classifier.
"""
from __future__ import annotations

import torch
from torch import nn

WIDTHS = (24, 48, 96, 192)
DEPTHS = (3, 5, 11, 7)
EXPANSION = 2.25
SE_RATIO = 1 / 16
STEM_WIDTH = 24
HEAD_WIDTH = 2048
CLIP = (16, 224, 224)   # frames, height, width


def round_channels(value: float, divisor: int = 8) -> int:
    """value rounded to the nearest multiple of divisor (at least divisor), never more than 10% below it."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn(c_in: int, c_out: int, kernel: tuple[int, int, int], stride: tuple[int, int, int] = (1, 1, 1),
             groups: int = 1) -> list[nn.Module]:
    padding = (kernel[0] // 2, kernel[1] // 2, kernel[2] // 2)
    return [nn.Conv3d(c_in, c_out, kernel, stride, padding, groups=groups, bias=False), nn.BatchNorm3d(c_out)]


class SqueezeExcite(nn.Module):
    """x * sigmoid(fc2(relu(fc1(avgpool(x))))), the fcs as 1x1x1 convs with bias (on a 1x1x1 map)."""

    def __init__(self, channels: int, ratio: float = SE_RATIO) -> None:
        super().__init__()
        hidden = round_channels(channels * ratio)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc1 = nn.Conv3d(channels, hidden, 1)
        self.fc2 = nn.Conv3d(hidden, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(self.pool(x)))))


class Bottleneck(nn.Module):
    """1x1x1 (ReLU) -> 3x3x3 channel-wise [SE] (swish) -> 1x1x1, plus the (projected) shortcut, then ReLU."""

    def __init__(self, c_in: int, c_out: int, inner: int, spatial_stride: int, se: bool) -> None:
        super().__init__()
        stride = (1, spatial_stride, spatial_stride)
        self.conv_a = nn.Sequential(*_conv_bn(c_in, inner, (1, 1, 1)), nn.ReLU(inplace=True))
        self.conv_b = nn.Sequential(*_conv_bn(inner, inner, (3, 3, 3), stride, groups=inner))
        self.se = SqueezeExcite(inner) if se else nn.Identity()
        self.act_b = nn.SiLU(inplace=True)
        self.conv_c = nn.Sequential(*_conv_bn(inner, c_out, (1, 1, 1)))
        self.shortcut = (nn.Sequential(*_conv_bn(c_in, c_out, (1, 1, 1), stride))
                         if c_in != c_out or spatial_stride != 1 else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv_c(self.act_b(self.se(self.conv_b(self.conv_a(x)))))
        return torch.relu(y + self.shortcut(x))


class X3D(nn.Module):
    """An X3D network: stem, bottleneck stages, conv head and classifier; input (N, 3, T, H, W)."""

    def __init__(self, widths: tuple[int, ...] = WIDTHS, depths: tuple[int, ...] = DEPTHS,
                 expansion: float = EXPANSION, num_classes: int = 400, dropout: float = 0.5) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv3d(3, STEM_WIDTH, (1, 3, 3), (1, 2, 2), (0, 1, 1), bias=False),
            nn.Conv3d(STEM_WIDTH, STEM_WIDTH, (5, 1, 1), padding=(2, 0, 0), groups=STEM_WIDTH, bias=False),
            nn.BatchNorm3d(STEM_WIDTH), nn.ReLU(inplace=True))
        stages, c_in = [], STEM_WIDTH
        for width, depth in zip(widths, depths):
            inner = round(width * expansion)
            blocks = [Bottleneck(c_in if i == 0 else width, width, inner, 2 if i == 0 else 1, se=i % 2 == 0)
                      for i in range(depth)]
            stages.append(nn.Sequential(*blocks))
            c_in = width
        self.stages = nn.Sequential(*stages)
        head_in = round(widths[-1] * expansion)
        self.conv_5 = nn.Sequential(*_conv_bn(c_in, head_in, (1, 1, 1)), nn.ReLU(inplace=True))
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.lin_5 = nn.Conv3d(head_in, HEAD_WIDTH, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(HEAD_WIDTH, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_5(self.stages(self.stem(x)))
        x = torch.relu(self.lin_5(self.pool(x)))
        return self.fc(self.dropout(torch.flatten(x, 1)))


def x3d_m(num_classes: int = 400) -> X3D:
    """X3D-M (about 3.8 M parameters), for 16 x 224 x 224 clips (CLIP)."""
    return X3D(num_classes=num_classes)
