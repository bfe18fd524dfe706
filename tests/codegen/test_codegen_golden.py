"""Generated source: golden files for representative GEMM and conv configs, int64 addressing, determinism.

Regenerate the golden files after an intended codegen change with
    TILEDISPATCH_UPDATE_GOLDEN=1 python -m pytest tests/codegen
and review the diff.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import tiledispatch as td
from tiledispatch.codegen import render_source
from tiledispatch.kernels.family import family_module
from tiledispatch.testing import suites

GOLDEN_DIR = Path(__file__).parent / "golden"
GOLDEN = {
    "tiled_plain": td.GemmConfig(family="tiled", layout="rcr", dtype="fp16", block_m=128, block_n=128, block_k=32,
                                 num_warps=4, num_stages=3, align=16),
    "tiled_full_epilogue": td.GemmConfig(family="tiled", layout="crr", dtype="bf16", block_m=64, block_n=64,
                                         block_k=32, num_warps=4, num_stages=3, group_m=4, align=1,
                                         activation="gelu_tanh", bias="row", num_d=2, with_c=True),
    "splitk_bias_relu": td.GemmConfig(family="splitk", layout="rrr", dtype="fp16", block_m=64, block_n=64,
                                      block_k=64, num_warps=4, num_stages=4, split_k=4, align=16,
                                      activation="relu", bias="col"),
    "tma_persistent_split": td.parse_name("gemm-tma_persistent-rcr-bf16-bf16-fp32-256x128x64-w8-s3-g8-k4-e1-a16-"
                                          "gelu-bcol-d0-c0"),
    # the epilogue stored from registers through pointers (subtile 0), with C, D and a row bias
    "tma_persistent_pointer_store": td.parse_name("gemm-tma_persistent-rcr-bf16-bf16-fp32-128x256x64-w8-s3-g8-k1-e0-"
                                                  "a16-silu-brow-d1-c1"),
    # stream-K lanes, workspace stores through a descriptor in column slices; and through pointers (subtile 0)
    "streamk_slices": td.parse_name("gemm-streamk-rrr-fp16-fp16-fp32-256x128x64-w8-s3-g8-k1-e2-a16-relu-bcol-d0-c0"),
    "streamk_pointer_store": td.parse_name("gemm-streamk-rcr-bf16-bf16-fp32-128x128x64-w4-s6-g8-k1-e0-a16-none-"
                                           "bnone-d1-c0"),
    # fp8: each K block's dot is promoted into the fp32 accumulator by an FMA outside the dot (scales at the end)
    "fp8_tiled": td.parse_name("gemm-tiled-rcr-fp8e4m3-bf16-fp32-64x128x128-w4-s4-g8-k1-e1-a16-none-bnone-d0-c0"),
    # fp8 tma_ws, the Gluon kernel: producer warp, two consumer warp groups, lagged promotion, row bias + gelu
    "ws_fp8_row_bias_gelu": td.parse_name("gemm-tma_ws-rcr-fp8e4m3-bf16-fp32-128x128x128-w4-s5-g8-k1-e1-a16-gelu-"
                                          "brow-d0-c0"),
    # the three-consumer form: 192-row tiles, A as three 64-row boxes, promotion without the lag, fp16 out
    "ws_fp8_tall": td.parse_name("gemm-tma_ws-rcr-fp8e4m3-fp16-fp32-192x128x128-w4-s4-g8-k1-e1-a16-none-bcol-d0-c0"),
    # split K: the last of a tile's three splits sums the fp32 slots, then a col bias + relu
    "ws_fp8_split": td.parse_name("gemm-tma_ws-rcr-fp8e4m3-bf16-fp32-128x128x128-w4-s4-g8-k3-e1-a16-relu-bcol-d0-c0"),
    "int8_tiled": td.GemmConfig(family="tiled", layout="ccr", dtype="int8", block_m=64, block_n=128, block_k=64,
                                num_warps=4, num_stages=3, align=1, activation="relu", bias="col", num_d=1),
    # convolution: one instance per family and direction (preset rows), including the entries a launch picks
    # between (direct dw / grouped, the wide / tall split reduce)
    "conv_igemm_fwd_bias_silu": td.parse_name("conv-igemm-fwd-2d-bf16-bf16-fp32-64x32x32-g4-w4-s3-k0-tap-a8-silu-b1"),
    "conv_igemm_bwd_data_split": td.parse_name("conv-igemm-bwd_data-2d-bf16-bf16-fp32-64x64x64-g1-w4-s4-k8-tap-a8-"
                                               "none-b0"),
    "conv_igemm_fwd_diag": td.parse_name("conv-igemm-fwd-2d-bf16-bf16-fp32-128x16x4-g1-w4-s3-k0-diag-a8-none-b0"),
    "conv_wgrad_flat": td.parse_name("conv-igemm-bwd_weight-3d-bf16-bf16-fp32-64x64x64-g1-w4-s3-k0-flat-a8-none-b0"),
    "conv_tma_wgrad_3d": td.parse_name("conv-tma-bwd_weight-3d-bf16-bf16-fp32-64x64x64-g1-w4-s3-k0-taprow-a8-none-b0"),
    "conv_wgrad_diagrow_3d": td.parse_name("conv-igemm-bwd_weight-3d-bf16-bf16-fp32-64x64x32-g1-w4-s4-k0-diagrow-a8-"
                                           "none-b0"),
    "conv_im2col_split": td.parse_name("conv-gemm-bwd_weight-2d-bf16-bf16-fp32-128x128x64-g1-w8-s3-k2-im2col-a8-"
                                       "none-b0"),
    "conv_im2col_fwd_epilogue": td.parse_name("conv-gemm-fwd-3d-bf16-bf16-fp32-128x128x64-g1-w8-s4-k1-im2col-a8-"
                                              "relu-b1"),
    "conv_col2im_dgrad": td.parse_name("conv-gemm-bwd_data-2d-bf16-bf16-fp32-128x128x64-g1-w8-s4-k1-im2col-a8-"
                                       "none-b0"),
    "conv_im2col_fwd_align1": td.parse_name("conv-gemm-fwd-2d-bf16-bf16-fp32-128x64x64-g1-w4-s4-k1-im2col-a1-"
                                            "none-b0"),
    "conv_direct_fwd_unroll3": td.parse_name("conv-direct-fwd-2d-bf16-bf16-fp32-64x32x3-g1-w4-s2-k0-tap-a8-none-b0"),
    "conv_direct_bwd_data_3d": td.parse_name("conv-direct-bwd_data-3d-fp16-fp16-fp32-32x64x1-g1-w4-s2-k0-tap-a4-"
                                             "none-b0"),
    "conv_direct_bwd_weight_chunk3": td.parse_name("conv-direct-bwd_weight-2d-bf16-bf16-fp32-32x32x3-g1-w2-s1-k0-"
                                                   "tap-a8-none-b0"),
    # pipelined: the pixel coordinates carried from trip to trip
    "conv_direct_bwd_weight_carried": td.parse_name("conv-direct-bwd_weight-3d-bf16-bf16-fp32-32x32x3-g1-w2-s3-k0-"
                                                    "tap-a8-none-b0"),
    "conv_roll_fwd_bias_gelu": td.parse_name("conv-direct-fwd-2d-bf16-bf16-fp32-64x32x3-g1-w4-s1-k0-roll-a8-gelu-b1"),
    "conv_roll_bwd_data_3d": td.parse_name("conv-direct-bwd_data-3d-bf16-bf16-fp32-32x32x3-g1-w4-s1-k0-roll-a2-none-"
                                           "b0"),
    "conv_roll_bwd_weight": td.parse_name("conv-direct-bwd_weight-2d-bf16-bf16-fp32-32x32x3-g1-w4-s2-k0-roll-a8-none-"
                                          "b0"),
    "conv_gemm_bwd_data_1x1": td.parse_name("conv-gemm-bwd_data-2d-bf16-bf16-fp32-64x64x32-g1-w4-s3-k0-tap-a1-"
                                            "none-b0"),
}


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_source_matches_golden_file(key):
    cfg = GOLDEN[key]
    source = render_source(cfg)
    path = GOLDEN_DIR / f"{key}.py"
    if os.environ.get("TILEDISPATCH_UPDATE_GOLDEN") == "1":
        path.write_text(source)
    assert path.exists(), f"missing golden file {path}; run with TILEDISPATCH_UPDATE_GOLDEN=1"
    assert source == path.read_text(), f"generated source of {cfg.name} changed; see the module docstring"


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_golden_header_names_the_instance(key):
    text = (GOLDEN_DIR / f"{key}.py").read_text()
    assert f"# instance: {GOLDEN[key].name}" in text
    tree = ast.parse(text)
    literals = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}
    assert ast.literal_eval(literals["NAME"]) == GOLDEN[key].name
    assert ast.literal_eval(literals["CONFIG"]) == GOLDEN[key].to_dict()
    entries = [e.to_json() for e in family_module(GOLDEN[key]).entries(GOLDEN[key])]
    assert ast.literal_eval(literals["ENTRIES"]) == entries


def test_rendering_is_deterministic_and_name_specific():
    cfg = GOLDEN["tiled_full_epilogue"]
    assert render_source(cfg) == render_source(td.parse_name(cfg.name))
    sources = {render_source(c) for c in suites.numeric_configs()}
    assert len(sources) == len(suites.numeric_configs())


# -- int64 addressing ----------------------------------------------------------------------------------------
def _is_int64_cast(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"
            and ast.unparse(node.args[0]) == "tl.int64")


class Int64Checker(ast.NodeVisitor):
    """Within each @triton.jit function: every product with a stride (or with M / N in workspace offsets)
    has an int64 offset factor - cast with .to(tl.int64) or a variable assigned from such a cast - or is the
    compile-time BLOCK_K pointer increment."""

    def __init__(self, stride_names: set[str]) -> None:
        self.strides = stride_names
        self.int64_names: set[str] = set()
        self.products: list[str] = []
        self.violations: list[str] = []

    def is_int64(self, node: ast.AST) -> bool:
        if _is_int64_cast(node):
            return True
        if isinstance(node, ast.Subscript):
            return self.is_int64(node.value)
        if isinstance(node, ast.Name):
            return node.id in self.int64_names
        if isinstance(node, ast.BinOp):
            return self.is_int64(node.left) or self.is_int64(node.right)
        return False

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        if self.is_int64(node.value):
            self.int64_names.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Mult):
            return
        for factor, other in ((node.right, node.left), (node.left, node.right)):
            name = factor.id if isinstance(factor, ast.Name) else None
            if name in self.strides or name in ("M", "N", "WS_LD"):   # WS_LD: the workspace row length
                self.products.append(ast.unparse(node))
                if not (self.is_int64(other) or ast.unparse(other) == "BLOCK_K"):
                    self.violations.append(ast.unparse(node))
                return


def int64_report(cfg):
    tree = ast.parse(render_source(cfg))
    report = {}
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        strides = {a.arg for a in fn.args.args if a.arg.startswith("stride_")}
        checker = Int64Checker(strides)
        for stmt in fn.body:
            checker.visit(stmt)
        report[fn.name] = checker
    return report


def _gemm_source(cfg) -> bool:
    """GEMM configs and conv instances of family 'gemm' (1x1 convolutions rendered as a GEMM kernel). The im2col
    instance counts as a conv source: its copy kernel takes the conv strides (its GEMM is the tma_persistent
    renderer the GEMM goldens check)."""
    return isinstance(cfg, td.GemmConfig) or (cfg.family == "gemm" and cfg.kloop != "im2col")


def _strided_source(cfg) -> bool:
    """GEMM sources that address memory through strides: not the Gluon fp8 tma_ws kernel, which reaches A, B and
    the output through TMA coordinates only (its one pointer, a bias vector, is indexed by a row or column)."""
    return _gemm_source(cfg) and all(e.dialect == "triton" for e in family_module(cfg).entries(cfg))


@pytest.mark.parametrize("cfg", [*filter(_strided_source, GOLDEN.values()), *suites.numeric_configs()],
                         ids=lambda c: c.name)
def test_offsets_are_int64_before_multiplying_by_strides(cfg):
    report = int64_report(cfg)
    assert report, "no @triton.jit function found"
    for fn, checker in report.items():
        assert checker.products, f"{fn}: no stride products found (checker out of date?)"
        assert not checker.violations, f"{fn}: 32-bit offsets times strides: {checker.violations}"
    for entry in family_module(cfg).entries(cfg):
        for p in entry.params:
            if p.name.startswith("stride_"):
                assert p.ty in ("i64", "constexpr"), (entry.fn, p)


@pytest.mark.parametrize("key", sorted(k for k, c in GOLDEN.items() if not _gemm_source(c)))
def test_conv_strides_are_int64(key):
    """Conv kernels take every tensor stride as an i64 argument (sx_*, sy_*, sw_*), so an int32 pixel or
    channel index times a stride is computed in 64 bits (Triton promotes the product to the wider type)."""
    cfg = GOLDEN[key]
    strides = [p for e in family_module(cfg).entries(cfg) for p in e.params if p.name[:3] in ("sx_", "sy_", "sw_")]
    assert strides and all(p.ty == "i64" for p in strides), strides


def test_int64_checker_catches_a_32_bit_offset():
    source = "def f(a_ptr, rm, stride_ar):\n    rm64 = rm.to(tl.int64)\n    x = a_ptr + rm64 * stride_ar + rm * stride_ar\n"
    fn = ast.parse(source).body[0]
    checker = Int64Checker({"stride_ar"})
    for stmt in fn.body:
        checker.visit(stmt)
    assert checker.violations == ["rm * stride_ar"]
