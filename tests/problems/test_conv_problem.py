"""ConvProblem: normalization of stride/padding/dilation, derived sizes checked against torch, the implicit-GEMM
view per direction, and bad input named by field."""
from __future__ import annotations

import math

import pytest
import torch

import tiledispatch as td


def torch_output(p: td.ConvProblem) -> tuple[int, ...]:
    """torch's forward output size on a meta tensor (asymmetric padding applied with F.pad first)."""
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[p.ndim]
    x = torch.empty(p.n, p.c, *p.spatial, device="meta")
    flat = [v for left, right in reversed(p.padding) for v in (left, right)]
    x = torch.nn.functional.pad(x, flat)
    w = torch.empty(p.k, p.c_per_group, *p.filter, device="meta")
    return tuple(conv(x, w, stride=p.stride, dilation=p.dilation, groups=p.groups).shape[2:])


# Why each case: a plain 3x3, stride 2 with an odd size (floor), dilation 2, asymmetric padding, 1D depthwise,
# 3D grouped with per-dim stride, a 1x1 with stride and padding.
CASES = [
    dict(direction="fwd", n=2, c=8, k=16, groups=1, spatial=(9, 9), filter=(3, 3), padding=1),
    dict(direction="bwd_data", n=1, c=6, k=6, groups=3, spatial=(11, 7), filter=(3, 3), stride=2, padding=1),
    dict(direction="bwd_weight", n=3, c=4, k=8, groups=2, spatial=(13, 10), filter=(3, 3), dilation=2, padding=2),
    dict(direction="fwd", n=1, c=4, k=4, groups=1, spatial=(8, 9), filter=(3, 2), padding=((0, 2), (1, 0))),
    dict(direction="fwd", n=2, c=12, k=12, groups=12, spatial=(17,), filter=(5,), stride=3, padding=2),
    dict(direction="bwd_weight", n=1, c=16, k=8, groups=4, spatial=(5, 9, 9), filter=(3, 3, 3), stride=(1, 2, 2),
         padding=(1, 1, 1)),
    dict(direction="fwd", n=2, c=8, k=8, groups=1, spatial=(7, 7), filter=(1, 1), stride=2, padding=1),
]


@pytest.mark.parametrize("case", CASES)
def test_output_size_matches_torch(case):
    p = td.ConvProblem(**case)
    assert p.output == torch_output(p)
    assert len(p.stride) == len(p.dilation) == len(p.padding) == p.ndim == len(case["spatial"])


@pytest.mark.parametrize("case", CASES)
def test_flops_bytes_and_implicit_gemm_agree(case):
    p = td.ConvProblem(**case)
    m, n, k = p.implicit_gemm()
    dense = 2 * m * n * k * p.groups
    if p.direction == "bwd_data" and math.prod(p.stride) > 1:   # the dense view counts zero-inserted taps
        in_px = p.n * math.prod(p.spatial)
        assert dense == 2 * in_px * p.c * p.k_per_group * math.prod(p.filter) and p.flops < dense
    else:
        assert dense == p.flops                                   # the same arithmetic in every direction
    sizes = p.tensor_elements()
    assert p.min_bytes == 2 * sum(sizes.values())  # bf16 in and out
    assert sizes["weight"] == p.k * p.c_per_group * math.prod(p.filter)


def test_padding_forms_normalize_to_pairs():
    base = dict(direction="fwd", n=1, c=2, k=2, groups=1, spatial=(8, 8), filter=(3, 3))
    assert td.ConvProblem(**base, padding=1).padding == ((1, 1), (1, 1))
    assert td.ConvProblem(**base, padding=(1, 2)).padding == ((1, 1), (2, 2))
    assert td.ConvProblem(**base, padding=((0, 1), (2, 0))).padding == ((0, 1), (2, 0))
    assert td.ConvProblem(**base).to_dict()["padding"] == ((0, 0), (0, 0))
    p = td.ConvProblem(**base, padding=((0, 1), (2, 0)), stride=2)
    assert td.ConvProblem.from_dict(p.to_dict()) == p
    assert p.signature() != td.ConvProblem(**base, padding=((1, 0), (2, 0)), stride=2).signature()


def test_depthwise_and_per_group_channels():
    p = td.ConvProblem("fwd", 1, 32, 32, 32, (8, 8), (3, 3))
    assert p.is_depthwise and p.c_per_group == p.k_per_group == 1
    assert td.ConvProblem("fwd", 1, 32, 64, 32, (8, 8), (3, 3)).c_per_group == 1   # channel multiplier 2


BASE = dict(direction="fwd", n=1, c=8, k=8, groups=2, spatial=(8, 8), filter=(3, 3))


@pytest.mark.parametrize("change, field", [
    (dict(direction="backward"), "direction"),
    (dict(groups=3), "groups"),                       # does not divide c=8
    (dict(c=8, k=6, groups=4), "groups"),             # divides c but not k
    (dict(n=0), "n"),
    (dict(spatial=(8, 8, 8, 8), filter=(1, 1, 1, 1)), "spatial"),
    (dict(filter=(3,)), "filter"),
    (dict(padding=-1), "padding"),
    (dict(padding=((1, -1), (0, 0))), "padding"),
    (dict(padding=(1, 1, 1)), "padding"),
    (dict(stride=0), "stride"),
    (dict(dilation=(1, 0)), "dilation"),
    (dict(filter=(9, 9)), "spatial"),                 # output size <= 0
    (dict(dtype="int8"), "dtype"),
])
def test_bad_input_names_the_field(change, field):
    with pytest.raises(td.BadInput) as info:
        td.ConvProblem(**{**BASE, **change})
    assert info.value.field == field, str(info.value)
