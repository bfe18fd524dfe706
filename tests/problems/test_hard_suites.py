"""The suites of the named categories (conv_suites.HARD_SUITES) and `named_category`: counts per category,
valid problems in every direction, batches, and the classifier's boundaries."""
from __future__ import annotations

import pytest

from tiledispatch.errors import BadInput
from tiledispatch.problems import conv_suites as cs
from tiledispatch.problems.conv import DIRECTIONS, ConvProblem

# unique problems per suite: (old category counts, named category counts; None: outside the named ones)
EXPECTED = {
    "dense3d_video": ({"dense3d": 33}, {"dense_3d": 32, None: 1}),
    "depthwise7x7": ({"depthwise": 16}, {"depthwise_7x7": 16}),
    "small_group3d": ({"grouped3d": 34}, {"small_group_3d": 27, None: 7}),
    "odd_size2d": ({"dense2d": 32}, {"odd_size_dense": 14, None: 18}),
}
# the named category each hard suite is for
FOR = dict(zip(cs.HARD_SUITES, cs.NAMED_CATEGORIES))


def counts(values: list) -> dict:
    return {v: values.count(v) for v in set(values)}


@pytest.mark.parametrize("name", cs.HARD_SUITES)
def test_counts_and_categories(name: str) -> None:
    cases = cs.suite(name)
    old, named = EXPECTED[name]
    assert {c: len(v) for c, v in cs.by_category(cases).items()} == old
    assert counts([cs.named_category(case.problem) for case in cases]) == named
    assert max(named, key=lambda k: named[k] if k else 0) == FOR[name]


@pytest.mark.parametrize("name", cs.HARD_SUITES)
def test_every_case_is_valid_in_every_direction(name: str) -> None:
    cases = cs.suite(name)
    assert len({case.problem for case in cases}) == len({case.name for case in cases}) == len(cases)
    assert cases == cs.suite(name)
    for case in cases:
        p = case.problem
        assert p.direction == "fwd" and all(o > 0 for o in p.output), case.name
        assert all(left == right for left, right in p.padding), case.name
        assert p.n == cs.MODEL_BATCH.get(case.model, cs.DEFAULT_BATCH[p.ndim])
        assert cs.named_category(p) == cs.named_category(_layer(name, case.layer, case.model))
        for direction in DIRECTIONS:
            back = case.for_direction(direction)
            assert back.direction == direction and back.flops == p.flops


def _layer(suite: str, layer: str, model: str) -> cs.Layer:
    tables = dict(cs._MODELS[suite])
    return next(entry for entry in tables[model]() if entry.name == layer)


def test_known_layers() -> None:
    """Spot checks against the public definitions."""
    dense = {c.name: c.problem for c in cs.suite("dense3d_video")}
    assert dense["c3d/conv5a"].output == (2, 7, 7) and dense["i3d/Mixed_5c.b1"].k == 384
    assert {c.model for c in cs.suite("dense3d_video")} == {"c3d", "i3d", "r3d_18"}
    dw = {c.name: c.problem for c in cs.suite("depthwise7x7")}
    assert dw["convnext_tiny_det/stage1.dwconv"].spatial == (200, 272)
    assert dw["convnextv2_nano/stage4.dwconv"].c == 640
    assert dw["convnext_base/stage1.dwconv"].output == (56, 56)
    assert all(p.n == 2 for name, p in dw.items() if name.startswith("convnext_tiny_det"))
    small = {c.name: c.problem for c in cs.suite("small_group3d")}
    g3 = small["shufflenet3d_g3/layer3.1.conv1"]
    assert (g3.c, g3.k, g3.groups, g3.spatial) == (960, 240, 3, (1, 4, 4))
    assert all(p.filter == (1, 1, 1) for p in small.values())   # no public small-G 3x3x3 layer
    odd = {c.name: c.problem for c in cs.suite("odd_size2d")}
    assert odd["fasterrcnn_r50_fpn/layer2.0.conv2"].output == (100, 136)
    assert odd["fasterrcnn_r50_fpn/rpn.head.conv@pool"].spatial == (13, 17)
    assert odd["yolov8m/detect.cv3.0.0"].n == 16 and odd["yolov8m/model.16"].output == (30, 40)


def geometry(ndim: int, c: int, k: int, groups: int, size: tuple[int, ...], f: int) -> ConvProblem:
    return ConvProblem("fwd", 1, c, k, groups, size, (f,) * ndim, padding=f // 2)


@pytest.mark.parametrize("problem, named", [
    (geometry(3, 64, 64, 1, (8, 28, 28), 3), "dense_3d"),
    (geometry(3, 64, 64, 1, (8, 28, 28), 1), None),              # 1x1x1: a GEMM, not this kind
    (geometry(3, 256, 256, 8, (8, 14, 14), 3), "small_group_3d"),
    (geometry(3, 256, 256, 16, (8, 14, 14), 3), None),           # 16 groups: too many
    (geometry(3, 96, 192, 3, (8, 14, 14), 3), "small_group_3d"),  # 32 in, 64 out per group
    (geometry(3, 93, 192, 3, (8, 14, 14), 3), None),             # 31 input channels per group
    (geometry(3, 64, 64, 64, (8, 14, 14), 3), None),             # depthwise 3-D
    (geometry(2, 96, 96, 96, (56, 56), 7), "depthwise_7x7"),
    (geometry(2, 96, 96, 96, (56, 56), 5), None),
    (geometry(2, 96, 192, 96, (56, 56), 7), None),               # channel multiplier 2: not depthwise
    (geometry(2, 128, 128, 1, (100, 136), 3), "odd_size_dense"),
    (geometry(2, 128, 128, 1, (35, 35), 3), None),               # square
    (geometry(2, 128, 128, 1, (64, 128), 3), None),              # powers of two
    (geometry(2, 128, 128, 1, (64, 96), 3), "odd_size_dense"),
    (geometry(2, 64, 128, 1, (100, 136), 3), None),              # 64 channels: below the range
    (geometry(2, 128, 512, 1, (100, 136), 3), None),             # 512: above it
    (geometry(2, 128, 128, 1, (100, 136), 1), None),
    (geometry(2, 128, 128, 2, (100, 136), 3), None),
    (geometry(1, 128, 128, 1, (100,), 3), None),
])
def test_named_category(problem: ConvProblem, named: str | None) -> None:
    assert cs.named_category(problem) == named
    layer = cs.Layer("x", problem.c, problem.k, problem.groups, problem.spatial, problem.filter,
                     problem.stride, tuple(left for left, _ in problem.padding))
    assert cs.named_category(layer) == named


def test_old_categories_and_defaults_unchanged() -> None:
    assert cs.SUITES == ("resnet50", "resnext50_32x4d", "mobilenet_v2", "video3d")
    assert not set(cs.HARD_SUITES) & set(cs.SUITES)
    every = cs.all_cases()
    assert len(every) == 70 and {c.model for c in every}.isdisjoint(cs.MODEL_BATCH)
    with pytest.raises(BadInput) as info:
        cs.suite("vgg16")
    assert "odd_size2d" in str(info.value)
