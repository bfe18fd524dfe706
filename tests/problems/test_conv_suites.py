"""The conv benchmark suites: sizes, categories, uniqueness, valid problems, direction conversion."""
from __future__ import annotations

import dataclasses
import math

import pytest

from tiledispatch.errors import BadInput
from tiledispatch.problems import conv_suites as cs
from tiledispatch.problems.conv import ConvProblem

# unique problems per suite (and per category) as written from the model definitions
EXPECTED = {"resnet50": {"dense2d": 23}, "resnext50_32x4d": {"grouped": 7}, "mobilenet_v2": {"depthwise": 10},
            "video3d": {"dense3d": 14, "grouped3d": 7, "depthwise3d": 9}}


@pytest.mark.parametrize("name", cs.SUITES)
def test_suite_counts_and_categories(name: str) -> None:
    cases = cs.suite(name)
    assert {c: len(v) for c, v in cs.by_category(cases).items()} == EXPECTED[name]
    assert all(case.category in cs.CATEGORIES for case in cases)


@pytest.mark.parametrize("name", cs.SUITES)
def test_suite_unique_deterministic_and_valid(name: str) -> None:
    cases = cs.suite(name)
    assert len({case.problem for case in cases}) == len(cases)
    assert len({case.name for case in cases}) == len(cases)
    assert cases == cs.suite(name)
    for case in cases:
        p = case.problem
        assert p.direction == "fwd" and p.dtype == "bf16"
        assert all(o > 0 for o in p.output)
        assert all(left == right for left, right in p.padding), case.name   # torch takes symmetric padding
        assert p.n == cs.DEFAULT_BATCH[p.ndim]


def test_categories_match_the_problems() -> None:
    for case in cs.all_cases():
        p = case.problem
        assert (p.ndim == 3) == case.category.endswith("3d")
        if case.category.startswith("depthwise"):
            assert p.is_depthwise and p.k == p.c
        elif case.category.startswith("grouped"):
            assert 1 < p.groups < p.c
        else:
            assert p.groups == 1


def test_known_layers() -> None:
    """Spot checks against the public definitions."""
    resnet = {c.layer: c.problem for c in cs.suite("resnet50")}
    stem = resnet["conv1"]
    assert (stem.c, stem.k, stem.filter, stem.stride, stem.output) == (3, 64, (7, 7), (2, 2), (112, 112))
    assert resnet["layer4.0.downsample"].output == (7, 7) and resnet["layer4.0.downsample"].filter == (1, 1)
    assert "layer1.0.downsample" not in resnet           # same problem as layer1.0.conv3: first name kept
    resnext = [c.problem for c in cs.suite("resnext50_32x4d")]
    assert sorted({p.c_per_group for p in resnext}) == [4, 8, 16, 32]
    assert all(p.groups == 32 and p.filter == (3, 3) for p in resnext)
    mobile = [c.problem for c in cs.suite("mobilenet_v2")]
    assert {p.stride for p in mobile} == {(1, 1), (2, 2)}
    assert {p.c for p in mobile} == {32, 96, 144, 192, 384, 576, 960}
    video = {c.name: c for c in cs.suite("video3d")}
    assert {c.model for c in video.values()} == {"x3d_m", "resnext3d_101", "r3d_18"}
    assert video["x3d_m/res2.0.conv_b"].problem.stride == (1, 2, 2)
    assert video["resnext3d_101/layer4.0.conv2"].problem.output == (1, 4, 4)


def test_batch_and_dtype_arguments() -> None:
    cases = cs.suite("video3d", dtype="fp16", batch=2)
    assert all(c.problem.n == 2 and c.problem.dtype == "fp16" for c in cases)
    assert [c.name for c in cases] == [c.name for c in cs.suite("video3d")]


def test_all_cases_dedupes_across_suites() -> None:
    every = cs.all_cases()
    assert len(every) == sum(sum(v.values()) for v in EXPECTED.values())
    doubled = cs.all_cases(("mobilenet_v2", "mobilenet_v2"))
    assert doubled == cs.suite("mobilenet_v2")


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_with_direction(direction: str) -> None:
    for case in cs.suite("resnext50_32x4d")[:2] + cs.suite("video3d")[:2]:
        p = case.for_direction(direction)
        assert p.direction == direction
        assert dataclasses.replace(p, direction="fwd") == case.problem
        assert p.flops == case.problem.flops
        assert math.prod(p.output) == math.prod(case.problem.output)


def test_with_direction_drops_the_epilogue_and_checks() -> None:
    p = ConvProblem("fwd", 1, 8, 8, 1, (4, 4), (3, 3), padding=1, bias=True, activation="relu")
    back = cs.with_direction(p, "bwd_data")
    assert not back.bias and back.activation == "none"
    assert cs.with_direction(p, "fwd") == p
    with pytest.raises(BadInput):
        cs.with_direction(p, "sideways")
    with pytest.raises(BadInput):
        cs.suite("vgg16")
