"""Convolution problem suites taken from public model definitions (layer shapes only): resnet50,
resnext50_32x4d, mobilenet_v2, video3d. Each entry is the forward problem of one layer at a batch size;
`with_direction` gives its backward problems. Sources and layer choices: docs/design/problems.md."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TypeVar

from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.problems.conv import DIRECTIONS, ConvProblem

Case = TypeVar("Case")   # a ConvCase, or any entry with a `.problem` (problems.corpus.CorpusEntry)
CATEGORIES = ("dense2d", "grouped", "depthwise", "dense3d", "grouped3d", "depthwise3d")
SUITES = ("resnet50", "resnext50_32x4d", "mobilenet_v2", "video3d")
DEFAULT_BATCH = {2: 32, 3: 8}


@dataclasses.dataclass(frozen=True)
class Layer:
    """One conv layer of a model definition, batch-free: total channels c -> k, groups, input spatial size,
    filter, stride and symmetric padding per dim."""

    name: str
    c: int
    k: int
    groups: int
    spatial: tuple[int, ...]
    filter: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ConvCase:
    """A suite entry: model, layer, category and the forward problem."""

    model: str
    layer: str
    category: str
    problem: ConvProblem

    @property
    def name(self) -> str:
        return f"{self.model}/{self.layer}"

    def for_direction(self, direction: str) -> ConvProblem:
        return with_direction(self.problem, direction)


def with_direction(problem: ConvProblem, direction: str) -> ConvProblem:
    """The same layer computed in `direction` (fwd, bwd_data, bwd_weight); the fused epilogue is dropped
    for the backward directions (it exists for fwd only)."""
    if direction not in DIRECTIONS:
        raise bad_choice(BadInput, "direction", direction, DIRECTIONS)
    if direction == "fwd":
        return dataclasses.replace(problem, direction=direction)
    return dataclasses.replace(problem, direction=direction, bias=False, activation="none")


def category(layer: Layer) -> str:
    """dense / grouped / depthwise by groups, suffixed 3d for 3D layers (2D ones: dense2d, grouped,
    depthwise)."""
    if layer.groups == 1:
        kind = "dense"
    elif layer.groups == layer.c and layer.k == layer.c:
        kind = "depthwise"
    else:
        kind = "grouped"
    if len(layer.spatial) == 3:
        return kind + "3d"
    return "dense2d" if kind == "dense" else kind


def _l2(name: str, c: int, k: int, size: int, f: int = 1, s: int = 1, g: int = 1) -> Layer:
    """A square 2D layer; padding f // 2 (same-size for stride 1)."""
    return Layer(name, c, k, g, (size, size), (f, f), (s, s), (f // 2, f // 2))


def _l3(name: str, c: int, k: int, spatial: tuple[int, int, int], f: tuple[int, int, int],
        s: tuple[int, int, int] = (1, 1, 1), g: int = 1) -> Layer:
    """A 3D layer; padding f // 2 per dim."""
    return Layer(name, c, k, g, spatial, f, s, tuple(x // 2 for x in f))


def resnet50_layers() -> list[Layer]:
    # (stage, input size of the stage, width, expanded output, channels entering the stage, first-block
    # stride)
    stages = ((1, 56, 64, 256, 64, 1), (2, 56, 128, 512, 256, 2), (3, 28, 256, 1024, 512, 2),
              (4, 14, 512, 2048, 1024, 2))
    layers = [_l2("conv1", 3, 64, 224, 7, 2)]
    for stage, size, width, out, inp, s in stages:
        after = size // s
        layers += [_l2(f"layer{stage}.0.conv1", inp, width, size),
                   _l2(f"layer{stage}.0.conv2", width, width, size, 3, s),
                   _l2(f"layer{stage}.0.conv3", width, out, after),
                   _l2(f"layer{stage}.0.downsample", inp, out, size, 1, s),
                   _l2(f"layer{stage}.1.conv1", out, width, after),
                   _l2(f"layer{stage}.1.conv2", width, width, after, 3)]
    return layers


def resnext50_layers() -> list[Layer]:
    layers = [_l2("layer1.conv2", 128, 128, 56, 3, 1, 32)]
    for stage, size, width in ((2, 56, 256), (3, 28, 512), (4, 14, 1024)):
        layers += [_l2(f"layer{stage}.0.conv2", width, width, size, 3, 2, 32),
                   _l2(f"layer{stage}.1.conv2", width, width, size // 2, 3, 1, 32)]
    return layers


def mobilenet_v2_layers() -> list[Layer]:
    # inverted-residual settings (expansion t, output channels, repeats, first stride); input 32 ch at 112
    settings = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))
    layers, channels, size = [], 32, 112
    for index, (t, out, repeats, stride) in enumerate(settings):
        for block in range(repeats):
            s = stride if block == 0 else 1
            hidden = channels * t
            layers.append(_l2(f"stage{index}.{block}.dw", hidden, hidden, size, 3, s, hidden))
            channels, size = out, size // s
    return layers


def x3d_m_layers() -> list[Layer]:
    t = 16
    layers = [Layer("stem.conv_xy", 3, 24, 1, (t, 224, 224), (1, 3, 3), (1, 2, 2), (0, 1, 1)),
              Layer("stem.conv_t", 24, 24, 24, (t, 112, 112), (5, 1, 1), (1, 1, 1), (2, 0, 0)),
              _l3("res2.0.conv_a", 24, 54, (t, 112, 112), (1, 1, 1))]
    for stage, size, inner in ((2, 112, 54), (3, 56, 108), (4, 28, 216), (5, 14, 432)):
        layers += [_l3(f"res{stage}.0.conv_b", inner, inner, (t, size, size), (3, 3, 3), (1, 2, 2), inner),
                   _l3(f"res{stage}.1.conv_b", inner, inner, (t, size // 2, size // 2), (3, 3, 3), g=inner)]
    layers += [_l3("res2.0.conv_c", 54, 24, (t, 56, 56), (1, 1, 1)),
               _l3("res5.0.conv_a", 96, 432, (t, 14, 14), (1, 1, 1)),
               _l3("conv_5", 192, 432, (t, 7, 7), (1, 1, 1))]
    return layers


def resnext3d_101_layers() -> list[Layer]:
    layers = [_l3("layer1.conv2", 128, 128, (8, 28, 28), (3, 3, 3), g=32)]
    for stage, (d, h), width in ((2, (8, 28), 256), (3, (4, 14), 512), (4, (2, 7), 1024)):
        after = (-(-d // 2), -(-h // 2), -(-h // 2))
        layers += [_l3(f"layer{stage}.0.conv2", width, width, (d, h, h), (3, 3, 3), (2, 2, 2), 32),
                   _l3(f"layer{stage}.1.conv2", width, width, after, (3, 3, 3), g=32)]
    return layers


def r3d_18_layers() -> list[Layer]:
    layers = [Layer("stem", 3, 64, 1, (16, 112, 112), (3, 7, 7), (1, 2, 2), (1, 3, 3)),
              _l3("layer1.conv", 64, 64, (16, 56, 56), (3, 3, 3)),
              _l3("layer2.0.conv1", 64, 128, (16, 56, 56), (3, 3, 3), (2, 2, 2)),
              _l3("layer2.0.downsample", 64, 128, (16, 56, 56), (1, 1, 1), (2, 2, 2)),
              _l3("layer2.conv", 128, 128, (8, 28, 28), (3, 3, 3))]
    for stage, (d, h), width in ((3, (8, 28), 256), (4, (4, 14), 512)):
        layers.append(_l3(f"layer{stage}.0.conv1", width // 2, width, (d, h, h), (3, 3, 3), (2, 2, 2)))
        layers.append(_l3(f"layer{stage}.conv", width, width, (d // 2, h // 2, h // 2), (3, 3, 3)))
    return layers


# suite -> ((model tag, layer function), ...)
_MODELS = {
    "resnet50": (("resnet50", resnet50_layers),),
    "resnext50_32x4d": (("resnext50_32x4d", resnext50_layers),),
    "mobilenet_v2": (("mobilenet_v2", mobilenet_v2_layers),),
    "video3d": (("x3d_m", x3d_m_layers), ("resnext3d_101", resnext3d_101_layers), ("r3d_18", r3d_18_layers)),
}


def problem_of(layer: Layer, batch: int, dtype: str = "bf16") -> ConvProblem:
    return ConvProblem("fwd", batch, layer.c, layer.k, layer.groups, layer.spatial, layer.filter,
                       stride=layer.stride, padding=layer.padding, dtype=dtype)


def suite(name: str, dtype: str = "bf16", batch: int | None = None) -> list[ConvCase]:
    """The de-duplicated forward cases of one suite. batch: N of every problem (default 32 for 2D, 8 for
    3D)."""
    if name not in _MODELS:
        raise bad_choice(BadInput, "suite", name, SUITES)
    return dedupe(_cases(name, dtype, batch))


def _cases(name: str, dtype: str, batch: int | None) -> list[ConvCase]:
    cases = []
    for model, layers in _MODELS[name]:
        for layer in layers():
            n = batch if batch is not None else DEFAULT_BATCH[len(layer.spatial)]
            cases.append(ConvCase(model, layer.name, category(layer), problem_of(layer, n, dtype)))
    return cases


def dedupe(cases: Iterable[Case]) -> list[Case]:
    """Each problem once, in order; the first entry wins. Works on anything with a `.problem` (suite cases,
    corpus entries)."""
    seen: set = set()
    out = []
    for case in cases:
        if case.problem not in seen:
            seen.add(case.problem)
            out.append(case)
    return out


def all_cases(suites: Iterable[str] = SUITES, dtype: str = "bf16",
              batch: int | None = None) -> list[ConvCase]:
    """The cases of several suites, de-duplicated across them (suite order kept)."""
    cases: list[ConvCase] = []
    for name in suites:
        cases += suite(name, dtype, batch)
    return dedupe(cases)


def by_category(cases: Iterable[ConvCase]) -> dict[str, list[ConvCase]]:
    """Cases grouped by category, in CATEGORIES order (empty categories left out)."""
    grouped: dict[str, list[ConvCase]] = {c: [] for c in CATEGORIES}
    for case in cases:
        grouped[case.category].append(case)
    return {c: v for c, v in grouped.items() if v}
