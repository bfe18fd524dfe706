"""Convolution problem suites taken from public model definitions (layer shapes only): resnet50,
resnext50_32x4d, mobilenet_v2, video3d (`SUITES`), and the suites of the layer kinds where the vendor
libraries still win (`HARD_SUITES`: dense 3-D, 7x7 depthwise, small-group 3-D, odd-size dense;
`named_category` names those kinds). Each entry is the forward problem of one layer at a batch size;
`with_direction` gives its backward problems. Sources and layer choices: docs/design/problems.md and the
comments of each table."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Protocol, TypeVar

from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.problems.conv import DIRECTIONS, ConvProblem

Case = TypeVar("Case")   # a ConvCase, or any entry with a `.problem` (problems.corpus.CorpusEntry)
CATEGORIES = ("dense2d", "grouped", "depthwise", "dense3d", "grouped3d", "depthwise3d")
SUITES = ("resnet50", "resnext50_32x4d", "mobilenet_v2", "video3d")
# suites of the named categories (out of SUITES: the default sets and their results stay as they were)
HARD_SUITES = ("dense3d_video", "depthwise7x7", "small_group3d", "odd_size2d")
NAMED_CATEGORIES = ("dense_3d", "depthwise_7x7", "small_group_3d", "odd_size_dense")
DEFAULT_BATCH = {2: 32, 3: 8}
# models whose public recipe runs a smaller batch than DEFAULT_BATCH (detection: 2 images per GPU at 800x1088;
# ultralytics' default training batch 16)
MODEL_BATCH = {"fasterrcnn_r50_fpn": 2, "convnext_tiny_det": 2, "yolov8m": 16}


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


class _Shape(Protocol):
    c: int
    k: int
    groups: int

    @property
    def spatial(self) -> tuple[int, ...]: ...

    @property
    def filter(self) -> tuple[int, ...]: ...


def named_category(shape: _Shape) -> str | None:
    """The named category of a layer or forward problem (one of NAMED_CATEGORIES), None outside them; apart
    from `category`, which it does not change. dense_3d: 3D, groups 1, filter larger than 1x1x1;
    depthwise_7x7: 2D depthwise (groups == c == k) with a 7x7 filter; small_group_3d: 3D, 2 <= groups <= 8,
    at least 32 input and 32 output channels per group; odd_size_dense: 2D, groups 1, 3x3 filter, H != W, not
    both powers of two, 96 <= c, k <= 256."""
    c, k, g, spatial, f = shape.c, shape.k, shape.groups, tuple(shape.spatial), tuple(shape.filter)
    if len(spatial) == 3:
        if g == 1 and math.prod(f) > 1:
            return "dense_3d"
        if 1 < g <= 8 and c // g >= 32 and k // g >= 32:
            return "small_group_3d"
        return None
    if len(spatial) != 2:
        return None
    if g == c == k and f == (7, 7):
        return "depthwise_7x7"
    h, w = spatial
    both_powers = h & (h - 1) == 0 and w & (w - 1) == 0
    if g == 1 and f == (3, 3) and h != w and not both_powers and 96 <= min(c, k) <= max(c, k) <= 256:
        return "odd_size_dense"
    return None


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


# -- the named categories' suites (HARD_SUITES) -------------------------------------------------------------


def c3d_layers() -> list[Layer]:
    # C3D (Tran et al. 2015, "Learning Spatiotemporal Features with 3D Convolutional Networks", 16x112x112):
    # 3x3x3 convs, padding 1; pool1 1x2x2, pool2-4 2x2x2 between the stages (conv5b repeats conv5a)
    convs = (("conv1a", 3, 64, (16, 112, 112)), ("conv2a", 64, 128, (16, 56, 56)),
             ("conv3a", 128, 256, (8, 28, 28)), ("conv3b", 256, 256, (8, 28, 28)),
             ("conv4a", 256, 512, (4, 14, 14)), ("conv4b", 512, 512, (4, 14, 14)),
             ("conv5a", 512, 512, (2, 7, 7)))
    return [_l3(name, c, k, size, (3, 3, 3)) for name, c, k, size in convs]


def i3d_layers() -> list[Layer]:
    # I3D (Carreira & Zisserman 2017, Inception-V1 inflated, 64x224x224): Conv3d_2c and the two 3x3x3 branches
    # (reduce -> out channels) of every Mixed block, at 32x56x56, 32x28x28, 16x14x14 and 8x7x7
    layers = [_l3("Conv3d_2c_3x3", 64, 192, (32, 56, 56), (3, 3, 3))]
    blocks = (("3b", (32, 28), (96, 128), (16, 32)), ("3c", (32, 28), (128, 192), (32, 96)),
              ("4b", (16, 14), (96, 208), (16, 48)), ("4c", (16, 14), (112, 224), (24, 64)),
              ("4d", (16, 14), (128, 256), (24, 64)), ("4e", (16, 14), (144, 288), (32, 64)),
              ("4f", (16, 14), (160, 320), (32, 128)), ("5b", (8, 7), (160, 320), (32, 128)),
              ("5c", (8, 7), (192, 384), (48, 128)))
    for name, (t, h), *branches in blocks:
        layers += [_l3(f"Mixed_{name}.b{b}", c, k, (t, h, h), (3, 3, 3))
                   for b, (c, k) in enumerate(branches, start=1)]
    return layers


def _convnext_dw(dims: tuple[int, ...], sizes: tuple[tuple[int, int], ...]) -> list[Layer]:
    """The 7x7 depthwise conv (padding 3) of each ConvNeXt stage."""
    return [Layer(f"stage{i}.dwconv", d, d, d, hw, (7, 7), (1, 1), (3, 3))
            for i, (d, hw) in enumerate(zip(dims, sizes), start=1)]


_IMAGENET = ((56, 56), (28, 28), (14, 14), (7, 7))     # ConvNeXt stages at 224x224 (stride-4 stem)
_DETECTION = ((200, 272), (100, 136), (50, 68), (25, 34))   # strides 4-32 of an 800x1088 input (see below)


def convnext_tiny_dw_layers() -> list[Layer]:
    # ConvNeXt-T (Liu et al. 2022, torchvision `convnext_tiny`, 224x224): dims 96/192/384/768
    return _convnext_dw((96, 192, 384, 768), _IMAGENET)


def convnext_base_dw_layers() -> list[Layer]:
    # ConvNeXt-B (same paper, torchvision `convnext_base`, 224x224): dims 128/256/512/1024
    return _convnext_dw((128, 256, 512, 1024), _IMAGENET)


def convnextv2_nano_dw_layers() -> list[Layer]:
    # ConvNeXt V2-Nano (Woo et al. 2023, facebookresearch/ConvNeXt-V2 `convnextv2_nano`, 224x224): 80..640
    return _convnext_dw((80, 160, 320, 640), _IMAGENET)


def convnext_tiny_det_dw_layers() -> list[Layer]:
    # ConvNeXt-T as the Mask R-CNN backbone of the ConvNeXt repository's COCO configs (mmdet, 1333x800 scale,
    # size divisor 32): a 640x480 image becomes 800x1088, the stages run at 200x272 .. 25x34
    return _convnext_dw((96, 192, 384, 768), _DETECTION)


def shufflenet3d_layers(groups: int, widths: tuple[int, int, int], stem: int) -> list[Layer]:
    """3D-ShuffleNetV1's grouped 1x1x1 convs: per stage, the first block (stride 2: reduce to width/4,
    depthwise 3x3x3 stride 2, expand to width - input channels, concatenated with the pooled input) and a
    later block (reduce, depthwise, expand to width); the first reduce after the 24-channel stem is not
    grouped."""
    layers, inp, t, h = [], stem, 8, 28    # after the stride-(1, 2, 2) 3x3x3 stem and the stride-2 max pool
    for stage, width in enumerate(widths, start=1):
        mid, t2, h2 = width // 4, -(-t // 2), -(-h // 2)
        layers += [_l3(f"layer{stage}.0.conv1", inp, mid, (t, h, h), (1, 1, 1), g=1 if inp == 24 else groups),
                   _l3(f"layer{stage}.0.conv3", mid, width - inp, (t2, h2, h2), (1, 1, 1), g=groups),
                   _l3(f"layer{stage}.1.conv1", width, mid, (t2, h2, h2), (1, 1, 1), g=groups),
                   _l3(f"layer{stage}.1.conv3", mid, width, (t2, h2, h2), (1, 1, 1), g=groups)]
        inp, t, h = width, t2, h2
    return [layer for layer in layers if layer.groups > 1]


def shufflenet3d_g3_layers() -> list[Layer]:
    # 3D-ShuffleNetV1 1.0x, 3 groups (Köpüklü et al. 2019, "Resource Efficient 3D Convolutional Neural
    # Networks", okankop/Efficient-3DCNNs `shufflenet.py`, 16x112x112): widths 240/480/960, stem 24.
    # No public 3-D definition we know has a 3x3x3 conv of <= 8 groups with >= 32 channels per group
    # (ResNeXt-3D has 32 groups of 4-32, CSN / X3D are depthwise): these grouped 1x1x1 convs are the closest
    # public layers (3-4 groups of 16-640 channels, small spatial sizes); 3x3x3 cases need the corpus' shapes
    return shufflenet3d_layers(3, (240, 480, 960), 24)


def shufflenet3d_g3_2x_layers() -> list[Layer]:
    # the same, width 2.0x (its published Kinetics model): widths 480/960/1920, stem 48
    return shufflenet3d_layers(3, (480, 960, 1920), 48)


def shufflenet3d_g4_layers() -> list[Layer]:
    # the same, 1.0x with 4 groups: widths 272/544/1088
    return shufflenet3d_layers(4, (272, 544, 1088), 24)


def fasterrcnn_r50_fpn_layers() -> list[Layer]:
    # torchvision `fasterrcnn_resnet50_fpn` on a 640x480 COCO image: resized to 800x1066 (short side 800),
    # padded to 800x1088 (size divisor 32). The 3x3 convs of the ResNet-50 body (v1.5: stride on the 3x3),
    # the FPN's 3x3 output convs (256 channels at strides 4-32; the RPN head's 3x3 conv has the same shapes)
    # and the RPN conv on the pooled 13x17 level
    layers = [_conv3x3("layer1.conv2", 64, 64, _DETECTION[0])]
    for stage, width in ((2, 128), (3, 256), (4, 512)):
        layers += [_conv3x3(f"layer{stage}.0.conv2", width, width, _DETECTION[stage - 2], 2),
                   _conv3x3(f"layer{stage}.1.conv2", width, width, _DETECTION[stage - 1])]
    layers += [_conv3x3(f"fpn.layer_blocks.{i}", 256, 256, hw) for i, hw in enumerate(_DETECTION)]
    return layers + [_conv3x3("rpn.head.conv@pool", 256, 256, (13, 17))]


def _conv3x3(name: str, c: int, k: int, size: tuple[int, int], s: int = 1) -> Layer:
    """A dense 3x3 layer of padding 1 on an H x W input."""
    return Layer(name, c, k, 1, size, (3, 3), (s, s), (1, 1))


def yolov8m_layers() -> list[Layer]:
    # Ultralytics YOLOv8m (yolov8.yaml, scale m: width 0.75, max channels 768) on a 640x480 image letterboxed
    # to 480x640 (rectangular validation): the 3x3 convs, padding 1, of the backbone, the neck's stride-2
    # convs, the C2f bottlenecks (c2 / 2 channels) and the Detect head's box (64) and class (192) branches
    sizes = ((480, 640), (240, 320), (120, 160), (60, 80), (30, 40), (15, 20))

    def conv(name: str, c: int, k: int, level: int, s: int = 1) -> Layer:
        return _conv3x3(name, c, k, sizes[level], s)

    layers = [conv("model.0", 3, 48, 0, 2), conv("model.1", 48, 96, 1, 2), conv("model.3", 96, 192, 2, 2),
              conv("model.5", 192, 384, 3, 2), conv("model.7", 384, 576, 4, 2),
              conv("model.16", 192, 192, 3, 2), conv("model.19", 384, 384, 4, 2)]
    layers += [conv(f"c2f.p{level + 1}.m", c, c, level)
               for level, c in ((2, 48), (3, 96), (4, 192), (5, 288))]
    for i, (c, level) in enumerate(((192, 3), (384, 4), (576, 5))):
        layers += [conv(f"detect.cv2.{i}.0", c, 64, level), conv(f"detect.cv2.{i}.1", 64, 64, level),
                   conv(f"detect.cv3.{i}.0", c, 192, level), conv(f"detect.cv3.{i}.1", 192, 192, level)]
    return layers


# suite -> ((model tag, layer function), ...)
_MODELS = {
    "resnet50": (("resnet50", resnet50_layers),),
    "resnext50_32x4d": (("resnext50_32x4d", resnext50_layers),),
    "mobilenet_v2": (("mobilenet_v2", mobilenet_v2_layers),),
    "video3d": (("x3d_m", x3d_m_layers), ("resnext3d_101", resnext3d_101_layers), ("r3d_18", r3d_18_layers)),
    "dense3d_video": (("c3d", c3d_layers), ("i3d", i3d_layers), ("r3d_18", r3d_18_layers)),
    "depthwise7x7": (("convnext_tiny", convnext_tiny_dw_layers), ("convnext_base", convnext_base_dw_layers),
                     ("convnextv2_nano", convnextv2_nano_dw_layers),
                     ("convnext_tiny_det", convnext_tiny_det_dw_layers)),
    "small_group3d": (("shufflenet3d_g3", shufflenet3d_g3_layers),
                      ("shufflenet3d_g3_2x", shufflenet3d_g3_2x_layers),
                      ("shufflenet3d_g4", shufflenet3d_g4_layers)),
    "odd_size2d": (("fasterrcnn_r50_fpn", fasterrcnn_r50_fpn_layers), ("yolov8m", yolov8m_layers)),
}


def problem_of(layer: Layer, batch: int, dtype: str = "bf16") -> ConvProblem:
    return ConvProblem("fwd", batch, layer.c, layer.k, layer.groups, layer.spatial, layer.filter,
                       stride=layer.stride, padding=layer.padding, dtype=dtype)


def suite(name: str, dtype: str = "bf16", batch: int | None = None) -> list[ConvCase]:
    """The de-duplicated forward cases of one suite (of SUITES or HARD_SUITES). batch: N of every problem
    (default: the model's MODEL_BATCH, else 32 for 2D, 8 for 3D)."""
    if name not in _MODELS:
        raise bad_choice(BadInput, "suite", name, SUITES + HARD_SUITES)
    return dedupe(_cases(name, dtype, batch))


def _cases(name: str, dtype: str, batch: int | None) -> list[ConvCase]:
    cases = []
    for model, layers in _MODELS[name]:
        for layer in layers():
            n = batch if batch is not None else MODEL_BATCH.get(model, DEFAULT_BATCH[len(layer.spatial)])
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
