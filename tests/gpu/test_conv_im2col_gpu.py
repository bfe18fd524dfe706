"""GPU lane for the im2col convolutions (kernels/conv_im2col.py): every preset candidate, forward with and without
the fused bias + activation epilogue, backward data and weight gradient, on real-size bf16 and fp16 problems vs
the reference."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import tiledispatch as td
from tiledispatch.kernels import conv_im2col
from tiledispatch.testing.reference import check_problems

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# (n, c, k, spatial, filter, stride, padding, dilation): ResNet-50 layer4 3x3 (7x7 pixels, 512 channels), a
# strided layer with asymmetric padding and odd sizes, dilation 2, a strided 1x1 (copied) and a stride-1 1x1
# (x read as cols), 1-D and 3-D; for the align-1 candidates a 3-channel 7x7 stride-2 stem and 24 -> 40 channels
CASES = {
    2: [(8, 512, 512, (7, 7), (3, 3), 1, 1, 1), (4, 64, 144, (27, 29), (3, 3), 2, ((0, 2), (1, 1)), 1),
        (4, 128, 64, (13, 13), (3, 3), 1, 2, 2), (4, 256, 128, (14, 14), (1, 1), 2, 0, 1),
        (4, 256, 64, (14, 14), (1, 1), 1, 0, 1), (4, 3, 64, (61, 67), (7, 7), 2, 3, 1),
        (4, 24, 40, (15, 17), (3, 3), 1, 1, 1)],
    1: [(4, 64, 96, (301,), (5,), 2, 2, 1)],
    3: [(2, 64, 64, (5, 13, 11), (3, 3, 3), 1, 1, 1), (2, 64, 128, (4, 14, 14), (1, 1, 1), 1, 0, 1)],
}


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("direction", conv_im2col.DIRECTIONS)
def test_every_candidate_on_real_sizes(direction, dtype):
    failures, runs = [], 0
    for ndim, cases in CASES.items():
        configs = conv_im2col.candidate_configs(dtype, ndim, direction)
        if direction == "fwd":   # the fused epilogue
            configs += [dataclasses.replace(configs[0], activation="relu", bias=True)]
        reg = td.Registry(td.detect())
        for cfg in configs:
            reg.add(cfg)
        assert not reg.build().failed
        epilogues = ((False, "none"), (True, "relu")) if direction == "fwd" else ((False, "none"),)
        problems = [td.ConvProblem(direction, n, c, k, 1, spatial, filt, stride, pad, dil, dtype, bias=bias,
                                   activation=act)
                    for n, c, k, spatial, filt, stride, pad, dil in cases for bias, act in epilogues]
        count, failed = check_problems(reg.kernels, problems)
        runs += count
        failures += failed
    print(f"{direction} {dtype}: {runs} kernel runs, {len(failures)} failures")
    assert runs > 0
    assert not failures, "\n".join(failures[:20])
