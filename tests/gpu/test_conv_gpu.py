"""GPU lane for convolutions (pytest -m gpu): every instance of the `all` presets on real-size problems in
bf16 and fp16, and a fuzz of 1,000 random problems per direction through td.conv* (auto selection)."""
from __future__ import annotations

import os
import random

import pytest
import torch

import tiledispatch as td
from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.presets import list_presets
from tiledispatch.testing.reference import check_problems, make_conv_args, validate_conv
from tiledispatch.testing.conv_fuzz import call_api, random_problems

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
FUZZ_COUNT = int(os.environ.get("TILEDISPATCH_CONV_FUZZ", "1000"))


def _problems(direction: str, ndim: int, dtype: str) -> list[td.ConvProblem]:
    """Real-size shapes of each kind: dense (C=K=64), grouped with 4, 8, 16 and 32 channels per group,
    depthwise (and with multiplier 2), stride 2, dilation 2, asymmetric padding, odd sizes (13, 27); depthwise
    54 and 108 channels (align 2 and 4), and stride 3 with dilation 2 (bwd_data phases of their own taps); even
    sizes at stride 2."""
    sp = {1: (301,), 2: (27, 29), 3: (7, 13, 11)}[ndim]
    f3 = (3,) * ndim
    cases = [(4, 64, 64, 1, f3, 1, 1, 1), (4, 128, 128, 32, f3, 1, 1, 1), (2, 256, 256, 32, f3, 2, 1, 1),
             (2, 128, 128, 8, f3, 1, 2, 2), (4, 512, 512, 16, f3, 1, 1, 1), (4, 96, 96, 96, f3, 1, 1, 1),
             (2, 96, 96, 96, f3, 2, 1, 1), (2, 40, 80, 40, f3, 1, 1, 1), (2, 64, 256, 1, (1,) * ndim, 1, 0, 1),
             (3, 24, 40, 1, (5,) * ndim, 1, ((2, 1),) * ndim, 1), (2, 13, 27, 1, f3, 1, ((0, 2),) * ndim, 1),
             (2, 54, 54, 54, f3, 2, 1, 1), (2, 108, 108, 108, f3, 1, 1, 1), (2, 96, 96, 96, f3, 3, 2, 2)]
    out = []
    for n, c, k, g, filt, stride, pad, dil in cases:
        out.append(td.ConvProblem(direction, n, c, k, g, sp, filt, stride, pad, dil, dtype))
    # even sizes at stride 2 (every output pixel's window inside the input at the far edge): a 3x3 and a strided
    # 1x1 (a ResNet downsample)
    even = {1: (300,), 2: (28, 30), 3: (8, 14, 12)}[ndim]
    for n, c, k, filt, pad in ((2, 64, 128, f3, 1), (2, 128, 256, (1,) * ndim, 0)):
        out.append(td.ConvProblem(direction, n, c, k, 1, even, filt, 2, pad, 1, dtype))
    return out


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_every_instance_of_the_all_presets(direction, dtype, ndim):
    """One preset per test (130-175 kernels), so that a device call can take a share of the 18 (-k)."""
    name = f"conv_{direction}_{dtype}_{ndim}d_all"
    if name not in list_presets():
        pytest.fail(f"preset {name} missing")
    reg = td.Registry(td.detect())
    reg.add_preset(name)
    report = reg.build()
    assert not report.failed, report.failed
    runs, failures = check_problems(reg.kernels, _problems(direction, ndim, dtype))
    print(f"{name}: {runs} kernel runs, {len(failures)} failures")
    assert runs > 0
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_fuzz_random_problems(direction):
    """FUZZ_COUNT random valid problems per direction (bf16 and fp16 alternating), auto selection."""
    failures, rng = [], random.Random(direction)
    problems = random_problems(FUZZ_COUNT // 2, direction, "bf16", seed=1) + random_problems(
        FUZZ_COUNT - FUZZ_COUNT // 2, direction, "fp16", seed=2)
    for problem in problems:
        args = make_conv_args(problem, "cuda", seed=rng.randrange(1 << 30))
        setattr(args, OUTPUT_ROLE[direction], None)
        try:
            out = call_api(problem, args)
        except td.TileDispatchError as exc:
            failures.append(f"{problem.describe()}: {type(exc).__name__}: {exc}")
            continue
        result = validate_conv(out, problem, args)
        if not result["passed"]:
            failures.append(f"{problem.describe()}: {result}")
    print(f"fuzz {direction}: {len(problems)} problems, {len(failures)} failures")
    assert not failures, "\n".join(failures[:20])
