"""td.conv / td.conv_bwd_data / td.conv_bwd_weight end to end on CPU tensors (interpreter): default registries
built from the essential presets, typed errors by field, and a property-based fuzz over random valid problems
(on the presets the cases build; every direction and ndim on small default registries)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiledispatch as td
from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.testing.reference import make_conv_args, validate_conv
from tiledispatch.testing.conv_fuzz import call_api, random_problem

pytestmark = pytest.mark.slow
# The essential presets (and epilogues) that the cases below build first: bwd_data 1-D, bwd_weight 3-D,
# fwd 1-D with bias and relu (fwd 2-D: tests/bundle builds it first)
PREBUILT = (("conv_bwd_data_fp16_1d_essential", ("none", False)),
            ("conv_bwd_weight_fp16_3d_essential", ("none", False)),
            ("conv_fwd_fp16_1d_essential", ("relu", True)))


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The default registries of PREBUILT as td.conv* build them, on the session's
    prebuild worker."""
    out = []
    for preset, epilogue in PREBUILT if items else ():
        registry = td.Registry()
        registry.add_preset(preset, epilogue)
        out.append(registry)
    return out


@pytest.fixture(scope="module", autouse=True)
def _prebuilt(prebuild):
    prebuild.claim(__name__)


def _check(problem):
    args = make_conv_args(problem, "cpu")
    setattr(args, OUTPUT_ROLE[problem.direction], None)
    out = call_api(problem, args)
    assert out.stride(1) == 1 or out.shape[1] == 1, "results are channels-last"
    result = validate_conv(out, problem, args)
    assert result["passed"], (problem, result)


# Each (direction, ndim, epilogue) builds its essential preset on first use (42-67 kernels, 13-30 s, 2 cores):
# the cases build one preset per direction, every ndim among them (fwd 2-D, shared with tests/bundle; fwd 1-D
# with the fused epilogue; bwd_data 1-D; bwd_weight 3-D). Why each case: grouped 3x3 with 4 channels per group
# (merged groups), depthwise stride 2, dense 1x1 (the GEMM route), asymmetric padding with dilation and
# stride 2, a depthwise 1x5 and a grouped 3x3x3 weight gradient.
CASES = [
    ("fwd", 2, 16, 16, 4, (6, 7), (3, 3), 1, 1, 1),
    ("fwd", 1, 8, 8, 8, (9, 8), (3, 3), 2, 1, 1),
    ("fwd", 2, 16, 24, 1, (5, 5), (1, 1), 1, 0, 1),
    ("bwd_data", 1, 8, 16, 2, (11,), (3,), 2, ((1, 2),), 2),
    ("bwd_weight", 2, 8, 8, 8, (2, 5, 9), (1, 3, 5), 1, (0, 1, 2), 1),
    ("bwd_weight", 1, 8, 8, 2, (3, 4, 5), (3, 3, 3), 1, 1, 1),
]


@pytest.mark.parametrize("case", CASES)
def test_one_call_api(case):
    direction, n, c, k, g, sp, f, s, pad, dil = case
    _check(td.ConvProblem(direction, n, c, k, g, sp, f, s, pad, dil, "fp16"))


def test_fused_bias_and_activation():
    _check(td.ConvProblem("fwd", 1, 8, 16, 2, (13,), (3,), 1, 1, 1, "fp16", bias=True, activation="relu"))


# The spatial dims of the default registries the cases above build, per direction: the fuzz over the real
# presets draws these (each other (direction, ndim) preset costs 13-30 s to build on 2 cores; the fuzz on
# small registries below covers every ndim).
PRESET_NDIMS = {"fwd": (2,), "bwd_data": (1,), "bwd_weight": (3,)}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), direction=st.sampled_from(("fwd", "bwd_data", "bwd_weight")))
def test_fuzz_random_valid_problems(seed, direction):
    """The selection over the essential presets picks a kernel that computes a random problem right."""
    import random

    problem = random_problem(random.Random(seed), direction, "fp16", max_pixels=64, max_channels=12,
                             max_batch=2, ndims=PRESET_NDIMS[direction])
    _check(problem)


@pytest.mark.parametrize("call, field", [
    (lambda x, w: td.conv(x, w, groups=3), "groups"),
    (lambda x, w: td.conv(x, w[:, :2]), "w"),
    (lambda x, w: td.conv(x, w.to(torch.float32)), "w"),
    (lambda x, w: td.conv(x.contiguous(), w), "x"),
    (lambda x, w: td.conv(x, w, padding=-1), "padding"),
    (lambda x, w: td.conv(x[:, :, :2, :2], w), "spatial"),
    (lambda x, w: td.conv(x, w, stride=0), "stride"),
    (lambda x, w: td.conv(x, w, activation="swish"), "activation"),
])
def test_bad_input_names_the_field(call, field):
    x = torch.randn(1, 8, 6, 6, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w = torch.randn(8, 8, 3, 3, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with pytest.raises(td.TileDispatchError) as info:
        call(x, w)
    assert info.value.field == field, info.value


def test_repeated_calls_go_straight_to_the_bound_launch(monkeypatch):
    """The first call of an argument signature derives and checks its problem once and selects once; a repeated
    signature reuses the remembered decision (no checks, no selection) on the new tensors' data; a changed
    layout takes the checked path again (and fails there when it is bad), as does a call after the default
    registries were reset; `tune` is never remembered."""
    from tiledispatch.dispatch import call, decide, defaults

    derived, checked, selected = [], [], []
    for module, name, log in ((call, "conv_problem", derived), (call, "prepare", checked),
                              (decide, "select", selected)):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _log=log, **k: _log.append(1) or _real(*a, **k))
    cl = torch.channels_last
    x = torch.randn(1, 8, 5, 5, dtype=torch.float16).contiguous(memory_format=cl)
    w = torch.randn(8, 1, 3, 3, dtype=torch.float16).contiguous(memory_format=cl)
    td.conv(x, w, padding=[1, 1], groups=8)                       # a list padding: kept as a tuple in the key
    assert (len(derived), len(checked), len(selected)) == (1, 1, 1)
    x2 = torch.randn(1, 8, 5, 5, dtype=torch.float16).contiguous(memory_format=cl)
    out = torch.full((1, 8, 5, 5), float("nan"), dtype=torch.float16).contiguous(memory_format=cl)
    y = td.conv(x2, w, padding=[1, 1], groups=8)                  # remembered: new data, same layout
    assert (len(derived), len(checked), len(selected)) == (1, 1, 1)
    ref = torch.nn.functional.conv2d(x2.double(), w.double(), padding=1, groups=8)
    assert float((y.double() - ref).norm() / ref.norm()) < 2e-3
    assert td.conv(x2, w, padding=[1, 1], groups=8, out=out) is out and len(checked) == 2   # out= is another one
    assert torch.equal(td.conv(x2, w, padding=[1, 1], groups=8, out=out), y) and len(checked) == 2
    with pytest.raises(td.BadInput) as info:                     # not channels-last: checked, and refused
        td.conv(x2.contiguous(), w, padding=[1, 1], groups=8)
    assert info.value.field == "x" and len(checked) == 3
    defaults.reset()                                             # the defaults forgotten: checked again
    td.conv(x2, w, padding=[1, 1], groups=8)
    assert len(checked) == 4
    td.conv(x2, w, padding=[1, 1], groups=8, strategy="tune")
    td.conv(x2, w, padding=[1, 1], groups=8, strategy="tune")
    assert len(checked) == 6                                     # tune: never remembered


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), direction=st.sampled_from(("fwd", "bwd_data", "bwd_weight")))
def test_fuzz_every_ndim_on_small_default_registries(small_defaults, seed, direction):
    """Random problems of 1-3 spatial dims through the one-call API, on small default registries (one
    implicit-GEMM kernel per key, tests/conftest.py)."""
    import random

    problem = random_problem(random.Random(seed), direction, "fp16", max_pixels=64, max_channels=12, max_batch=2)
    _check(problem)
