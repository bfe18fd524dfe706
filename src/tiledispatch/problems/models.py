"""Layer tables of public model definitions (shapes only) for the problem corpus, beyond `conv_suites`: 1-D,
2-D and 3-D conv tables (batch-free `Layer`s) and `LLM_PROJECTIONS` (N, K) of LLM linear layers. Sources
and layer choices of every table: docs/design/problems.md."""
from __future__ import annotations

from collections.abc import Callable

from tiledispatch.problems.conv_suites import (Layer, _l2, _l3, mobilenet_v2_layers, r3d_18_layers,
                                               resnet50_layers, resnext3d_101_layers, resnext50_layers,
                                               x3d_m_layers)


def _l1(name: str, c: int, k: int, length: int, f: int, s: int = 1, g: int = 1,
        p: int | None = None) -> Layer:
    """A 1D layer; padding f // 2 unless given."""
    return Layer(name, c, k, g, (length,), (f,), (s,), (f // 2 if p is None else p,))


def _down(size: int, stride: int) -> int:
    """Output size of a padded k//2 conv of odd kernel: ceil(size / stride)."""
    return -(-size // stride)


# ----------------------------------------------------------------------------------------------------- 2D


def resnet18_34_layers() -> list[Layer]:
    layers = [_l2("conv1", 3, 64, 224, 7, 2), _l2("layer1.conv", 64, 64, 56, 3)]
    for stage, size, width in ((2, 56, 128), (3, 28, 256), (4, 14, 512)):
        inp = width // 2
        layers += [_l2(f"layer{stage}.0.conv1", inp, width, size, 3, 2),
                   _l2(f"layer{stage}.0.downsample", inp, width, size, 1, 2),
                   _l2(f"layer{stage}.conv", width, width, size // 2, 3)]
    return layers


def resnext101_32x8d_layers() -> list[Layer]:
    # (stage, input size, grouped width = output width, channels entering the stage, first-block stride)
    stages = ((1, 56, 256, 64, 1), (2, 56, 512, 256, 2), (3, 28, 1024, 512, 2), (4, 14, 2048, 1024, 2))
    layers = [_l2("conv1", 3, 64, 224, 7, 2)]
    for stage, size, width, inp, s in stages:
        after = size // s
        layers += [_l2(f"layer{stage}.0.conv1", inp, width, size),
                   _l2(f"layer{stage}.0.conv2", width, width, size, 3, s, 32),
                   _l2(f"layer{stage}.0.conv3", width, width, after),
                   _l2(f"layer{stage}.0.downsample", inp, width, size, 1, s)]
        if s != 1:
            layers.append(_l2(f"layer{stage}.1.conv2", width, width, after, 3, 1, 32))
    return layers


def _regnet(stem: int, widths: tuple[int, ...], group_width: int) -> list[Layer]:
    """RegNet X/Y body (bottleneck ratio 1): per stage a 1x1, a grouped 3x3 (stride 2 in block 0), a 1x1,
    the stride-2 1x1 shortcut of block 0 and the 1x1 / 3x3 of the later blocks."""
    layers = [_l2("stem", 3, stem, 224, 3, 2)]
    inp, size = stem, 112
    for stage, width in enumerate(widths, start=1):
        g, after = width // group_width, size // 2
        layers += [_l2(f"s{stage}.b1.a", inp, width, size),
                   _l2(f"s{stage}.b1.b", width, width, size, 3, 2, g),
                   _l2(f"s{stage}.b1.c", width, width, after),
                   _l2(f"s{stage}.b1.proj", inp, width, size, 1, 2),
                   _l2(f"s{stage}.b2.b", width, width, after, 3, 1, g)]
        inp, size = width, after
    return layers


def regnetx_400mf_layers() -> list[Layer]:
    return _regnet(32, (32, 64, 160, 384), 16)


def regnety_1_6gf_layers() -> list[Layer]:
    return _regnet(32, (48, 120, 336, 888), 24)


def _inverted_residual(name: str, inp: int, hidden: int, out: int, size: int, f: int, s: int) -> list[Layer]:
    """1x1 expand (left out when hidden == inp), depthwise f x f with stride s, 1x1 project."""
    layers = [] if hidden == inp else [_l2(f"{name}.expand", inp, hidden, size)]
    return layers + [_l2(f"{name}.dw", hidden, hidden, size, f, s, hidden),
                     _l2(f"{name}.project", hidden, out, _down(size, s))]


def efficientnet_b0_layers() -> list[Layer]:
    # MBConv stages: (expansion, kernel, first stride, output channels, repeats)
    stages = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
              (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
    layers, inp, size = [_l2("stem", 3, 32, 224, 3, 2)], 32, 112
    for index, (t, f, stride, out, repeats) in enumerate(stages, start=1):
        for block in range(min(repeats, 2)):        # later repeats repeat block 1
            s = stride if block == 0 else 1
            layers += _inverted_residual(f"features.{index}.{block}", inp, inp * t, out, size, f, s)
            inp, size = out, _down(size, s)
    return layers + [_l2("head", 320, 1280, 7)]


def mobilenet_v3_large_layers() -> list[Layer]:
    # bneck blocks: (kernel, expanded channels, output channels, stride); input 16 channels at 112
    blocks = ((3, 16, 16, 1), (3, 64, 24, 2), (3, 72, 24, 1), (5, 72, 40, 2), (5, 120, 40, 1),
              (3, 240, 80, 2), (3, 200, 80, 1), (3, 184, 80, 1), (3, 480, 112, 1), (3, 672, 112, 1),
              (5, 672, 160, 2), (5, 960, 160, 1))
    layers, inp, size = [_l2("stem", 3, 16, 224, 3, 2)], 16, 112
    for index, (f, hidden, out, s) in enumerate(blocks, start=1):
        layers += _inverted_residual(f"features.{index}", inp, hidden, out, size, f, s)
        inp, size = out, _down(size, s)
    return layers + [_l2("last_conv", 160, 960, 7)]


def convnext_tiny_layers() -> list[Layer]:
    dims = (96, 192, 384, 768)
    layers = [Layer("stem", 3, 96, 1, (224, 224), (4, 4), (4, 4), (0, 0))]
    for stage, (dim, size) in enumerate(zip(dims, (56, 28, 14, 7)), start=1):
        if stage > 1:
            layers.append(Layer(f"downsample{stage}", dim // 2, dim, 1, (2 * size, 2 * size), (2, 2), (2, 2),
                                (0, 0)))
        layers += [_l2(f"stage{stage}.dwconv", dim, dim, size, 7, 1, dim),
                   _l2(f"stage{stage}.pwconv1", dim, 4 * dim, size),
                   _l2(f"stage{stage}.pwconv2", 4 * dim, dim, size)]
    return layers


def conformer_subsampling_layers() -> list[Layer]:
    layers = []
    for size, d in (("s", 144), ("m", 256), ("l", 512)):
        layers += [Layer(f"{size}.conv1", 1, d, 1, (1000, 80), (3, 3), (2, 2), (0, 0)),
                   Layer(f"{size}.conv2", d, d, 1, (499, 39), (3, 3), (2, 2), (0, 0))]
    return layers


# ----------------------------------------------------------------------------------------------------- 3D


def r2plus1d_18_layers() -> list[Layer]:
    layers = [_l3("stem.spatial", 3, 45, (16, 112, 112), (1, 7, 7), (1, 2, 2)),
              _l3("stem.temporal", 45, 64, (16, 56, 56), (3, 1, 1))]
    t, h, inp = 16, 56, 64
    for stage, out in enumerate((64, 128, 256, 512), start=1):
        s = 1 if stage == 1 else 2
        for block in range(2):
            c_in, st = (inp, s) if block == 0 else (out, 1)
            mid = (c_in * out * 27) // (c_in * 9 + 3 * out)
            name = f"layer{stage}.{block}"
            layers += [_l3(f"{name}.conv1.spatial", c_in, mid, (t, h, h), (1, 3, 3), (1, st, st)),
                       _l3(f"{name}.conv1.temporal", mid, out, (t, h // st, h // st), (3, 1, 1), (st, 1, 1))]
            if st == 2:
                layers.append(_l3(f"{name}.downsample", c_in, out, (t, h, h), (1, 1, 1), (2, 2, 2)))
            t, h = t // st, h // st
            layers += [_l3(f"{name}.conv2.spatial", out, mid, (t, h, h), (1, 3, 3)),
                       _l3(f"{name}.conv2.temporal", mid, out, (t, h, h), (3, 1, 1))]
        inp = out
    return layers


def ir_csn_101_layers() -> list[Layer]:
    layers = [_l3("stem", 3, 64, (8, 224, 224), (3, 7, 7), (1, 2, 2))]
    t, h, inp = 8, 56, 64
    for stage, inner in enumerate((64, 128, 256, 512), start=1):
        out, s = 4 * inner, 1 if stage == 1 else 2
        t2, h2 = _down(t, s), _down(h, s)
        layers += [_l3(f"s{stage}.0.conv_a", inp, inner, (t, h, h), (1, 1, 1)),
                   _l3(f"s{stage}.0.conv_b", inner, inner, (t, h, h), (3, 3, 3), (s, s, s), inner),
                   _l3(f"s{stage}.0.conv_c", inner, out, (t2, h2, h2), (1, 1, 1)),
                   _l3(f"s{stage}.0.shortcut", inp, out, (t, h, h), (1, 1, 1), (s, s, s)),
                   _l3(f"s{stage}.1.conv_a", out, inner, (t2, h2, h2), (1, 1, 1)),
                   _l3(f"s{stage}.1.conv_b", inner, inner, (t2, h2, h2), (3, 3, 3), g=inner)]
        t, h, inp = t2, h2, out
    return layers


def mobilenet_v2_3d_layers() -> list[Layer]:
    # (expansion, output channels, repeats, first stride in every dim); stem 3x3x3 stride (1, 2, 2) to 32
    settings = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))
    layers = [_l3("stem", 3, 32, (16, 112, 112), (3, 3, 3), (1, 2, 2))]
    inp, t, h = 32, 16, 56
    for index, (e, out, repeats, stride) in enumerate(settings):
        for block in range(min(repeats, 2)):
            s, hidden = (stride if block == 0 else 1), inp * e
            name = f"features.{index}.{block}"
            if hidden != inp:
                layers.append(_l3(f"{name}.expand", inp, hidden, (t, h, h), (1, 1, 1)))
            layers.append(_l3(f"{name}.dw", hidden, hidden, (t, h, h), (3, 3, 3), (s, s, s), hidden))
            t, h = _down(t, s), _down(h, s)
            layers.append(_l3(f"{name}.project", hidden, out, (t, h, h), (1, 1, 1)))
            inp = out
    return layers


# ----------------------------------------------------------------------------------------------------- 1D


def wav2vec2_encoder_layers() -> list[Layer]:
    layers, length, c = [], 16000, 1
    for index, (f, s) in enumerate(((10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2))):
        layers.append(_l1(f"conv{index}", c, 512, length, f, s, p=0))
        length, c = (length - f) // s + 1, 512
    return layers + [_l1("pos_conv", 768, 768, length, 128, 1, 16, p=64)]


def conformer_conv_layers() -> list[Layer]:
    layers = []
    for size, d in (("s", 144), ("m", 256), ("l", 512)):
        layers += [_l1(f"{size}.pointwise1", d, 2 * d, 250, 1), _l1(f"{size}.depthwise", d, d, 250, 31, g=d),
                   _l1(f"{size}.pointwise2", d, d, 250, 1)]
    return layers


def mamba_conv_layers() -> list[Layer]:
    return [_l1(f"{name}.conv1d", d, d, 2048, 4, g=d, p=3)
            for name, d in (("130m", 1536), ("1.4b", 4096), ("2.8b", 5120))]


# Every conv model of the corpus: model tag -> layer table (conv_suites' first, then this module's).
CONV_MODELS: dict[str, Callable[[], list[Layer]]] = {
    "resnet50": resnet50_layers,
    "resnext50_32x4d": resnext50_layers,
    "mobilenet_v2": mobilenet_v2_layers,
    "x3d_m": x3d_m_layers,
    "resnext3d_101": resnext3d_101_layers,
    "r3d_18": r3d_18_layers,
    "resnet18_34": resnet18_34_layers,
    "resnext101_32x8d": resnext101_32x8d_layers,
    "regnetx_400mf": regnetx_400mf_layers,
    "regnety_1_6gf": regnety_1_6gf_layers,
    "efficientnet_b0": efficientnet_b0_layers,
    "mobilenet_v3_large": mobilenet_v3_large_layers,
    "convnext_tiny": convnext_tiny_layers,
    "conformer_subsampling": conformer_subsampling_layers,
    "r2plus1d_18": r2plus1d_18_layers,
    "ir_csn_101": ir_csn_101_layers,
    "mobilenet_v2_3d": mobilenet_v2_3d_layers,
    "wav2vec2_encoder": wav2vec2_encoder_layers,
    "conformer_conv": conformer_conv_layers,
    "mamba_conv": mamba_conv_layers,
}


# ---------------------------------------------------------------------------------------------------- GEMM


def _decoder(hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int, vocab: int,
             gated: bool = True) -> tuple[tuple[str, tuple[int, int]], ...]:
    """(proj, (N, K)) of one decoder layer and the LM head: fused qkv, o, (gate+)up, down, lm_head."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return (("qkv", (q + 2 * kv, hidden)), ("o", (hidden, q)), ("gate_up" if gated else "fc1",
            ((2 if gated else 1) * ffn, hidden)), ("down" if gated else "fc2", (hidden, ffn)),
            ("lm_head", (vocab, hidden)))


# model -> ((proj, (N, K)), ...). The values are the models' hidden / FFN / head / vocabulary sizes from their
# public configs. Mixtral's expert FFNs are the gate_up / down entries (each expert sees a share of the
# tokens); `router` is its gate (8 experts). BERT's encoder and GPT-2's blocks use an ungated FFN (fc1 / fc2).
LLM_PROJECTIONS: dict[str, tuple[tuple[str, tuple[int, int]], ...]] = {
    "llama3_8b": _decoder(4096, 32, 8, 128, 14336, 128256),
    "llama3_70b": _decoder(8192, 64, 8, 128, 28672, 128256),
    "llama3_2_1b": _decoder(2048, 32, 8, 64, 8192, 128256),
    "qwen2_5_7b": _decoder(3584, 28, 4, 128, 18944, 152064),
    "qwen2_5_0_5b": _decoder(896, 14, 2, 64, 4864, 151936),
    "mistral_7b": _decoder(4096, 32, 8, 128, 14336, 32000),
    "mixtral_8x7b": _decoder(4096, 32, 8, 128, 14336, 32000) + (("router", (8, 4096)),),
    "mixtral_8x22b": _decoder(6144, 48, 8, 128, 16384, 32768) + (("router", (8, 6144)),),
    "gemma2_9b": _decoder(3584, 16, 8, 256, 14336, 256000),
    "phi3_mini": _decoder(3072, 32, 32, 96, 8192, 32064),
    "gpt2": _decoder(768, 12, 12, 64, 3072, 50257, gated=False),
    "gpt2_xl": _decoder(1600, 25, 25, 64, 6400, 50257, gated=False),
    "bert_base": _decoder(768, 12, 12, 64, 3072, 30522, gated=False),
    "bert_large": _decoder(1024, 16, 16, 64, 4096, 30522, gated=False),
}
