"""The kernel configs the CPU test lane compiles, in one place so that one worker pool builds them all.

Budget: every distinct config is one sm_90 compile (~0.5-1.5 s) and every test launch an interpreter run, so
the numerics grid is one small config per (family, dtype, layout) and the epilogue features are spread over
those instances (see `numeric_configs`; tests/runtime asserts the coverage).
"""
from __future__ import annotations

from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.gemm import Epilogue
from tiledispatch.testing import small_config

FAMILIES = ("tiled", "splitk")
FLOAT_DTYPES = ("fp16", "bf16", "fp32", "tf32")
LAYOUTS = ("rcr", "rrr", "crr", "ccr")

# Tile shape and group_m per layout: square, wide, tall tiles and different swizzle group sizes.
LAYOUT_TILES = {"rcr": ((32, 32, 32), 8), "rrr": ((16, 64, 32), 1), "crr": ((32, 32, 32), 2),
                "ccr": ((64, 16, 32), 4)}
# split_k per layout for the splitk family: 3 leaves some splits with an empty K range for small K.
LAYOUT_SPLITS = {"rcr": 2, "rrr": 3, "crr": 2, "ccr": 4}

# Eight epilogues: every activation, bias none/row/col, num_d 0/1/2, with and without C.
FLOAT_EPILOGUES = (
    Epilogue(),
    Epilogue("relu", "col", 1, True),
    Epilogue("gelu", "row", 2, False),
    Epilogue("gelu_tanh", "col", 0, True),
    Epilogue("silu", "row", 1, True),
    Epilogue("sigmoid", "none", 2, True),
    Epilogue("tanh", "col", 1, False),
    Epilogue("none", "row", 0, True),
)
# int8 kernels support activation none / relu only (exact int32 epilogue).
INT8_EPILOGUES = (
    Epilogue(),
    Epilogue("relu", "col", 1, True),
    Epilogue("none", "row", 2, False),
    Epilogue("relu", "row", 0, True),
)


def _numeric(family: str, layout: str, dtype: str, epilogue: Epilogue, out_dtype: str = "") -> GemmConfig:
    block, group_m = LAYOUT_TILES[layout]
    split = LAYOUT_SPLITS[layout] if family == "splitk" else 1
    return small_config(family, layout, dtype, block=block, group_m=group_m, split_k=split,
                        out_dtype=out_dtype).with_epilogue(epilogue)


def numeric_configs() -> list[GemmConfig]:
    """One config per (family, dtype, layout); the epilogue rotates so that each family sees all eight float
    epilogues (each twice), each float dtype sees all eight over its two families, and each (family, dtype)
    sees bias row and col, num_d 1 and 2, and C. Plus two instances whose output dtype differs from the
    input."""
    out = []
    for f, family in enumerate(FAMILIES):
        for d, dtype in enumerate(FLOAT_DTYPES):
            for l_, layout in enumerate(LAYOUTS):
                epilogue = FLOAT_EPILOGUES[(4 * d + l_ + 4 * f) % len(FLOAT_EPILOGUES)]
                out.append(_numeric(family, layout, dtype, epilogue))
        for l_, layout in enumerate(LAYOUTS):
            out.append(_numeric(family, layout, "int8", INT8_EPILOGUES[(l_ + 2 * f) % len(INT8_EPILOGUES)]))
    out.append(_numeric("tiled", "rcr", "fp16", Epilogue("gelu", "col", 1, True), out_dtype="fp32"))
    out.append(_numeric("splitk", "crr", "bf16", Epilogue("silu", "row", 2, False), out_dtype="fp16"))
    return out


def fuzz_configs() -> list[GemmConfig]:
    """align=1 kernels only, so that every shape is supported without padding."""
    out = [small_config("tiled", layout, dtype) for dtype in ("fp16", "fp32") for layout in LAYOUTS]
    out += [small_config("splitk", layout, "fp16", split_k=2) for layout in LAYOUTS]
    return out


def aligned_configs() -> list[GemmConfig]:
    """fp16 rcr kernels that assume 16-byte alignment (and their a1 twin)."""
    return [small_config("tiled", "rcr", "fp16", align=16),
            small_config("splitk", "rcr", "fp16", align=16, split_k=2),
            small_config("tiled", "rcr", "fp16", align=16, with_c=True),
            small_config("tiled", "rcr", "fp16", align=1)]


def padding_configs() -> list[GemmConfig]:
    """An a16 rrr kernel: padding of N alone leaves a row-major A in place."""
    return [small_config("tiled", "rrr", "fp16", align=16)]


def select_configs() -> list[GemmConfig]:
    """Three fp16 rcr plain kernels of different shapes for strategy tests (first_fit, rules, tune)."""
    return [small_config("tiled", "rcr", "fp16"),
            small_config("tiled", "rcr", "fp16", block=(16, 64, 32)),
            small_config("splitk", "rcr", "fp16", split_k=2)]


def error_configs() -> list[GemmConfig]:
    return [small_config("tiled", "rcr", "fp16"), small_config("tiled", "rcr", "fp16", bias="col"),
            small_config("tiled", "rcr", "int8")]


TMA_FAMILIES = ("tma_persistent", "tma_ws", "streamk")


def family_epilogue(family: str, epilogue: Epilogue) -> Epilogue:
    """`epilogue` as `family` accepts it: tma_ws reads nothing indexed by output rows (kernels/gemm_tma.py),
    so it keeps the activation and takes a column bias where a row bias was asked for."""
    if family != "tma_ws":
        return epilogue
    return Epilogue(epilogue.activation, "col" if epilogue.bias == "row" else epilogue.bias)


def tma_configs() -> list[GemmConfig]:
    """The persistent TMA families on the interpreter: one fp16 config per (family, layout) with the float
    epilogues rotated over them (tma_persistent and streamk rotate epilogue subtiles 1, 2 and 0, the pointer
    stores), fp8 for every family that the interpreter runs (fp8 tma_ws is a Gluon kernel: gluon_configs), and
    bf16 (through the interpreter's fp32 dot) with the subtiled descriptor epilogue."""
    out = []
    for f, family in enumerate(TMA_FAMILIES):
        for l_, layout in enumerate(LAYOUTS):
            subtile = {"tma_persistent": (1, 2, 0, 1)[l_], "streamk": (1, 2, 1, 0)[l_]}.get(family, 1)
            epilogue = family_epilogue(family, FLOAT_EPILOGUES[(3 * f + l_) % len(FLOAT_EPILOGUES)])
            out.append(small_config(family, layout, "fp16", align=16,
                                    subtile=subtile).with_epilogue(epilogue))
    for i, family in enumerate(("tiled", "splitk", *TMA_FAMILIES)):
        if family == "tma_ws":
            continue
        epilogue = family_epilogue(family, FLOAT_EPILOGUES[(i + 5) % 8])
        out.append(small_config(family, "rcr", "fp8e4m3", align=16).with_epilogue(epilogue))
    out.append(small_config("tma_persistent", "rrr", "bf16", align=16, subtile=2,
                            out_dtype="fp32").with_epilogue(Epilogue("silu", "row", 2, True)))
    # split over K (the last unit of a tile runs the epilogue): 3 splits with C, D and a row bias; fp8 with 2
    out.append(small_config("tma_persistent", "rcr", "fp16", align=16, split_k=3).with_epilogue(
        Epilogue("gelu", "row", 1, True)))
    out.append(small_config("tma_persistent", "crr", "fp16", align=16, split_k=2).with_epilogue(
        Epilogue("silu", "col", 2, False)))
    out.append(small_config("tma_persistent", "rcr", "fp8e4m3", align=16, split_k=2).with_epilogue(
        Epilogue("relu", "col", 0, False)))
    return out


def gluon_configs() -> list[GemmConfig]:
    """fp8 tma_ws, the Gluon kernel: compiled for sm_90 in the CPU lane (the interpreter cannot run Gluon),
    with both tile widths, the three-consumer 192-row tile, split K, every bias mode, activations and output
    types."""
    wide = dict(block=(128, 128, 128), align=16)
    return [small_config("tma_ws", "rcr", "fp8e4m3", stages=6, **wide),
            small_config("tma_ws", "rcr", "fp8e4m3", stages=4, out_dtype="fp16", **wide).with_epilogue(
                Epilogue("gelu", "col")),
            small_config("tma_ws", "rcr", "fp8e4m3", block=(128, 64, 128), align=16, stages=8,
                         out_dtype="fp32").with_epilogue(Epilogue("silu", "row")),
            small_config("tma_ws", "rcr", "fp8e4m3", block=(192, 128, 128), align=16, stages=4).with_epilogue(
                Epilogue("relu", "row")),
            # split K: the last of a tile's splits sums the fp32 slots and runs the epilogue
            small_config("tma_ws", "rcr", "fp8e4m3", stages=4, split_k=2, **wide).with_epilogue(
                Epilogue("gelu", "col")),
            small_config("tma_ws", "rcr", "fp8e4m3", block=(192, 128, 128), align=16, stages=3, split_k=3,
                         out_dtype="fp16")]


def all_configs() -> list[GemmConfig]:
    seen: dict[str, GemmConfig] = {}
    for group in (numeric_configs(), fuzz_configs(), aligned_configs(), padding_configs(), select_configs(),
                  error_configs(), tma_configs(), gluon_configs()):
        for cfg in group:
            seen.setdefault(cfg.name, cfg)
    return list(seen.values())
