"""Regenerate the packaged convolution presets (src/tiledispatch/presets/conv_*.json).

conv_{direction}_{dtype}_{ndim}d_all: every candidate instance of the families for that direction (implicit GEMM
dense and merged-group tiles, block-diagonal tiles for small equal groups, direct kernels for depthwise / few
channels per group, 1x1-as-GEMM, fwd / bwd_weight through an im2col workspace and a TMA GEMM, and stride-1
fwd / bwd_data / bwd_weight over tensor-copy boxes; 2-D depthwise filter windows slid along W in registers),
the set `benchmarks/conv.py` tunes over. _essential:
the subset the one-call API builds by default (the instances a greedy cover of the H200 sweeps chose,
tools/derive_conv_essential.py, with --extend's additions, the instances that won layers of the H200 suite whose code no sweep measured,
the halo instances that won its 7x7 depthwise layers (2-D), and the tap-loop fallbacks below align 8). Direct instances of `_all` come with 1, 2 and 3 pipelined load stages. Invalid configs for
sm_90 are never written (the validity predicate is the filter). fp32 instances use fewer stages (4-byte tiles).
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

from tiledispatch.arch import get_arch
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors

OUT = Path(__file__).resolve().parents[1] / "src" / "tiledispatch" / "presets"
ESSENTIAL = Path(__file__).resolve().parent / "conv_essential.json"
DTYPES = ("bf16", "fp16", "fp32")
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
# (family, BM, BN, BK, groups per program, warps, stages, kloop, align[, split_k]); split_k >= 2: the reduction
# loop may split into up to that many ranges (problems whose tiles leave most SMs idle)
IGEMM = [
    ("igemm", 128, 128, 64, 1, 8, 3, "tap", 8), ("igemm", 128, 64, 64, 1, 4, 3, "tap", 8),
    ("igemm", 64, 128, 64, 1, 4, 3, "tap", 8), ("igemm", 128, 256, 64, 1, 8, 3, "tap", 8),
    ("igemm", 64, 64, 64, 1, 4, 4, "tap", 8), ("igemm", 64, 32, 32, 4, 4, 3, "tap", 8),
    ("igemm", 64, 16, 16, 8, 4, 3, "flat", 8), ("igemm", 32, 16, 16, 16, 4, 3, "flat", 8),
    ("igemm", 64, 16, 32, 4, 4, 3, "flat", 8), ("igemm", 64, 64, 32, 1, 4, 2, "tap", 1),
    ("igemm", 64, 16, 16, 4, 4, 2, "flat", 1), ("igemm", 128, 16, 16, 4, 4, 3, "tap", 8),
    ("igemm", 128, 32, 32, 2, 4, 3, "tap", 8), ("igemm", 128, 16, 16, 8, 8, 3, "flat", 8),
    ("igemm", 32, 16, 16, 8, 4, 3, "flat", 1), ("igemm", 128, 128, 64, 1, 8, 4, "tap", 8),
    # split reductions: few pixels x many channels (ResNet layer4, 3-D late stages)
    ("igemm", 64, 64, 64, 1, 4, 4, "tap", 8, 8), ("igemm", 128, 64, 64, 1, 4, 3, "tap", 8, 8),
    ("igemm", 64, 128, 64, 1, 4, 3, "tap", 8, 8), ("igemm", 128, 128, 64, 1, 8, 3, "tap", 8, 8),
    ("igemm", 64, 32, 32, 4, 4, 3, "tap", 8, 8),
    # dense stems with 3 input channels (align 1): (tap, channel) pairs packed into the reduction (fwd), few
    # result columns (bwd_data's 3 channels)
    ("igemm", 128, 64, 32, 1, 4, 3, "flat", 1), ("igemm", 64, 32, 32, 1, 4, 3, "flat", 1),
    ("igemm", 128, 16, 64, 1, 4, 3, "tap", 1),
]
# block-diagonal dots for C/G == K/G in {2, 4, 8, 16} (block_k is C/G): 16-channel tiles waste the least
# tensor-core work, 32/64-channel tiles make larger wgmmas
DIAG = [("igemm", 128, 16, cg, 1, 4, 3, "diag", 8) for cg in (2, 4, 8, 16)] + [
    ("igemm", 128, 32, 4, 1, 4, 3, "diag", 8), ("igemm", 128, 32, 8, 1, 4, 3, "diag", 8),
    ("igemm", 64, 32, 4, 1, 4, 3, "diag", 8), ("igemm", 128, 64, 8, 1, 4, 3, "diag", 8),
    ("igemm", 128, 64, 16, 1, 4, 3, "diag", 8), ("igemm", 64, 16, 4, 1, 4, 2, "diag", 1),
    ("igemm", 64, 16, 2, 1, 4, 2, "diag", 1),
]
DIRECT_SPATIAL = [
    ("direct", 32, 64, 1, 1, 4, 2, "tap", 8), ("direct", 64, 64, 1, 1, 8, 2, "tap", 8),
    ("direct", 128, 32, 1, 1, 8, 2, "tap", 8), ("direct", 64, 16, 1, 1, 2, 2, "tap", 8),
    ("direct", 64, 16, 1, 1, 2, 2, "tap", 1), ("direct", 256, 32, 1, 1, 8, 2, "tap", 8),
    ("direct", 128, 64, 1, 1, 8, 2, "tap", 8), ("direct", 256, 16, 1, 1, 4, 2, "tap", 8),
    ("direct", 64, 32, 1, 1, 4, 2, "tap", 8),
    # the innermost filter dim unrolled (3: 3x3 / 3x3x3 filters, 5: 5x5): loads of a filter row in flight at once
    ("direct", 64, 32, 3, 1, 4, 2, "tap", 8), ("direct", 128, 32, 3, 1, 8, 2, "tap", 8),
    ("direct", 64, 16, 3, 1, 2, 2, "tap", 8), ("direct", 64, 64, 3, 1, 8, 2, "tap", 8),
    ("direct", 32, 64, 3, 1, 4, 2, "tap", 8), ("direct", 64, 32, 5, 1, 4, 2, "tap", 8),
    # channel totals that are multiples of 2 or 4 but not 8 (54, 108): 4- and 8-byte vectors
    *(row for a in (2, 4) for row in (("direct", 64, 32, 3, 1, 4, 2, "tap", a),
                                      ("direct", 32, 64, 3, 1, 4, 2, "tap", a), ("direct", 64, 32, 1, 1, 4, 2, "tap", a))),
    # depthwise rows rolled through three accumulators (kernels/conv_roll.py; fwd / bwd_data, 2-D and 3-D):
    # block_m pixels along W, filter columns unrolled to 3; not yet measured, so in no essential preset
    ("direct", 64, 32, 3, 1, 4, 2, "roll", 8), ("direct", 32, 64, 3, 1, 4, 2, "roll", 8),
    ("direct", 128, 32, 3, 1, 4, 2, "roll", 8), ("direct", 64, 16, 3, 1, 2, 2, "roll", 8),
    ("direct", 32, 32, 3, 1, 2, 2, "roll", 8), ("direct", 64, 32, 3, 1, 4, 1, "roll", 8),   # (s1: no pipelining)
    *(row for a in (2, 4) for row in (("direct", 64, 32, 3, 1, 4, 2, "roll", a),
                                      ("direct", 32, 64, 3, 1, 4, 2, "roll", a))),
    # narrow strips for 14- and 7-pixel-wide images (MobileNetV2 stages 3-5, X3D res4-5): a 32-column strip of
    # a 14-wide row computes 18 masked columns
    ("direct", 16, 64, 3, 1, 2, 2, "roll", 8), ("direct", 16, 128, 3, 1, 4, 2, "roll", 8),
    ("direct", 8, 128, 3, 1, 2, 2, "roll", 8),
]
# kloop 'roll' (kernels/conv_roll.py): depthwise rows rolled, 3 filter columns unrolled: 9 accumulator tiles of
# 8 values per thread; not yet measured, so in no essential preset
ROLL_WGRAD = [("direct", 32, 32, 3, 1, 4, 2, "roll", 8), ("direct", 64, 16, 3, 1, 4, 2, "roll", 8),
              ("direct", 32, 16, 3, 1, 2, 2, "roll", 8), ("direct", 64, 32, 3, 1, 8, 2, "roll", 8),
              ("direct", 32, 32, 3, 1, 4, 1, "roll", 8),
              *(("direct", 32, 32, 3, 1, 4, 2, "roll", a) for a in (2, 4)),
              # narrow strips (14- and 7-pixel-wide images)
              ("direct", 16, 64, 3, 1, 4, 2, "roll", 8), ("direct", 8, 128, 3, 1, 4, 2, "roll", 8)]
# kloop 'halo' (kernels/conv_halo.py): 2-D depthwise filters up to 7 wide slid along W in registers, block_m
# output rows x 8 columns x block_n channels per program (fwd, bwd_data and bwd_weight); their stages are listed
# here, not expanded (tools/probe_halo7.py measured them against cuDNN on the depthwise7x7 suite, H200)
HALO = [("direct", bm, bn, 7, 1, warps, stages, "halo", 8)
        for bm, bn, warps in ((4, 64, 4), (2, 64, 2), (8, 32, 4), (8, 64, 8), (1, 64, 1),
                              (8, 64, 4), (4, 64, 2), (4, 128, 4), (16, 32, 4))
        for stages in (1, 2)]
# kloop 'halofh' (kernels/conv_halo_fh.py): 2-D depthwise bwd_weight with the filter rows in the tile, each dy
# row loaded once; (block_m dy columns, block_n, warps, split_k (0: per problem), stages), block_k 7 and 5
# (tools/probe_halo_wgrad.py measured the 7-wide ones against cuDNN on the depthwise7x7 suite, H200, stop 54)
HALOFH = [("direct", bm, bn, bk, 1, warps, stages, "halofh", 8, split)
          for bm, bn, warps, split, stages in (
              (7, 64, 4, 0, 1), (7, 32, 2, 0, 1), (7, 32, 4, 0, 1), (7, 64, 8, 0, 1), (7, 32, 1, 0, 1),
              (8, 64, 4, 0, 1), (8, 32, 4, 0, 1), (8, 64, 8, 0, 1), (14, 64, 4, 0, 1), (14, 32, 4, 0, 1),
              (16, 32, 4, 0, 1), (7, 64, 4, 2, 1), (7, 32, 4, 2, 1), (7, 64, 8, 2, 1), (7, 64, 4, 4, 1),
              (7, 64, 4, 0, 2), (8, 64, 4, 0, 2))
          for bk in (7, 5)]
# block_k: filter taps per program (one accumulator tile each). 3 measured best on most depthwise problems of
# the H200 (session 9, 2-D and 3-D); the 9-tap rows reuse one dy tile for a whole 3x3 filter
DIRECT_WGRAD = [
    ("direct", 32, 32, 9, 1, 4, 2, "tap", 8), ("direct", 64, 64, 9, 1, 16, 2, "tap", 8),
    ("direct", 32, 64, 3, 1, 4, 2, "tap", 8), ("direct", 64, 16, 9, 1, 4, 2, "tap", 8),
    ("direct", 64, 16, 9, 1, 4, 2, "tap", 1),
    *(row for a in (2, 4) for row in (("direct", 32, 64, 3, 1, 4, 2, "tap", a), ("direct", 64, 16, 9, 1, 4, 2, "tap", a))),
    ("direct", 32, 32, 3, 1, 2, 1, "tap", 8), ("direct", 64, 32, 3, 1, 4, 1, "tap", 8),
    ("direct", 128, 16, 3, 1, 4, 1, "tap", 8), ("direct", 64, 16, 3, 1, 4, 1, "tap", 8),
    ("direct", 64, 16, 3, 1, 2, 1, "tap", 8), ("direct", 32, 32, 1, 1, 4, 1, "tap", 8),
    *(row for a in (2, 4) for row in (("direct", 64, 16, 3, 1, 2, 1, "tap", a), ("direct", 32, 32, 3, 1, 2, 1, "tap", a),
                                      ("direct", 64, 32, 3, 1, 4, 1, "tap", a))),
]
# family tma (kernels/conv_tma.py): stride-1 fwd / bwd_data over tensor-copy boxes, one group per tile
TMA = [
    ("tma", 128, 128, 64, 1, 8, 3, "tap", 8), ("tma", 128, 64, 64, 1, 4, 4, "tap", 8), ("tma", 64, 128, 64, 1, 4, 4, "tap", 8),
    ("tma", 256, 128, 64, 1, 8, 3, "tap", 8), ("tma", 128, 128, 64, 1, 4, 3, "tap", 8),
    # split reductions (at most split_k ranges): few tiles with a long reduction (7x7 / 14x14 3x3 layers)
    ("tma", 128, 128, 64, 1, 8, 3, "tap", 8, 4), ("tma", 64, 128, 64, 1, 4, 4, "tap", 8, 4),
    ("tma", 128, 128, 64, 1, 4, 3, "tap", 8, 4),
    ("tma", 128, 64, 64, 1, 4, 4, "tap", 8, 4), ("tma", 64, 64, 64, 1, 4, 4, "tap", 8, 8),
    # grouped, 16 or 32 channels per group (fwd also 8: chunks past the group meet zero-filled weights)
    ("tma", 128, 32, 32, 1, 4, 4, "tap", 8), ("tma", 64, 32, 32, 1, 4, 4, "tap", 8),
    ("tma", 128, 16, 16, 1, 4, 4, "tap", 8),
]
# ... and stride-1 bwd_weight (kernels/conv_tma_wgrad.py): (k, c) tiles of a filter row, block_k pixels per box
TMA_WGRAD = [
    ("tma", 64, 64, 64, 1, 4, 3, "taprow", 8), ("tma", 128, 64, 64, 1, 8, 3, "taprow", 8),
    ("tma", 64, 128, 64, 1, 8, 3, "taprow", 8), ("tma", 64, 64, 128, 1, 4, 3, "taprow", 8),
    ("tma", 32, 32, 64, 1, 4, 3, "taprow", 8),
]
GEMM_1X1 = [
    ("gemm", 128, 128, 64, 1, 8, 4, "tap", 8), ("gemm", 128, 256, 64, 1, 8, 3, "tap", 8),
    ("gemm", 128, 64, 64, 1, 4, 4, "tap", 8), ("gemm", 64, 128, 64, 1, 4, 4, "tap", 8),
    ("gemm", 64, 64, 32, 1, 4, 3, "tap", 1),
    # split_k=1: the tiled GEMM (pointer loads) instead of tma_persistent, for few pixels
    ("gemm", 64, 128, 64, 1, 4, 4, "tap", 8, 1), ("gemm", 128, 128, 64, 1, 8, 4, "tap", 8, 1),
    ("gemm", 128, 64, 64, 1, 4, 4, "tap", 8, 1),
    # 2 stages: less shared memory, more programs per SM, for a reduction of one or two K blocks (64 channels)
    ("gemm", 128, 64, 64, 1, 4, 2, "tap", 8, 1), ("gemm", 64, 64, 64, 1, 4, 2, "tap", 8, 1),
    # align 2: channel totals multiples of 2 (x3d's 24 / 54), rows of 4-byte vectors on the tiled GEMM
    ("gemm", 128, 32, 64, 1, 4, 3, "tap", 2), ("gemm", 128, 64, 32, 1, 4, 3, "tap", 2),
    ("gemm", 64, 64, 32, 1, 4, 3, "tap", 2), ("gemm", 256, 32, 64, 1, 8, 3, "tap", 2),
]

# bwd_weight of 1x1 convolutions (stride 1, no padding): dw = dy^T x, a K x C GEMM reduced over every pixel on the
# split-K GEMM family; split_k is fixed per instance (many pixels and few output tiles want many splits; 1: the
# unsplit tiled GEMM, for few pixels)
GEMM_1X1_WGRAD = [
    ("gemm", 64, 128, 64, 1, 4, 4, "tap", 8, 1), ("gemm", 128, 128, 64, 1, 8, 4, "tap", 8, 1),
    ("gemm", 64, 128, 64, 1, 4, 4, "tap", 8, 4), ("gemm", 64, 128, 64, 1, 4, 4, "tap", 8, 8),
    ("gemm", 64, 128, 64, 1, 4, 4, "tap", 8, 16),
    ("gemm", 128, 128, 64, 1, 8, 3, "tap", 8, 16), ("gemm", 128, 128, 64, 1, 8, 3, "tap", 8, 64),
    ("gemm", 128, 64, 64, 1, 4, 3, "tap", 8, 32), ("gemm", 64, 64, 64, 1, 4, 3, "tap", 8, 32),
    ("gemm", 64, 64, 64, 1, 4, 3, "tap", 8, 64), ("gemm", 64, 64, 64, 1, 4, 3, "tap", 1, 64),
    ("gemm", 64, 32, 64, 1, 4, 3, "tap", 1, 64),
    ("gemm", 64, 32, 64, 1, 4, 3, "tap", 2, 64), ("gemm", 64, 64, 64, 1, 4, 3, "tap", 2, 64),
    # 128 / 256 splits (folded reduce): a weight gradient of one or two tiles over millions of pixels (x3d's
    # 24 <-> 54-channel pointwise layers) is memory-bound, and 64 programs leave half the SMs idle
    ("gemm", 64, 32, 64, 1, 4, 4, "tap", 2, 128), ("gemm", 64, 32, 64, 1, 4, 3, "tap", 2, 256),
    ("gemm", 32, 64, 64, 1, 4, 3, "tap", 2, 128), ("gemm", 32, 64, 64, 1, 4, 3, "tap", 2, 256),
    ("gemm", 64, 32, 64, 1, 4, 4, "tap", 1, 128), ("gemm", 64, 64, 64, 1, 4, 4, "tap", 8, 128),
    ("gemm", 64, 32, 64, 1, 4, 4, "tap", 8, 256),
]


def _im2col(direction: str) -> list[tuple]:
    """fwd / bwd_weight of one group through an im2col workspace and the tma_persistent GEMM
    (kernels/conv_im2col.py); none for bwd_data."""
    from tiledispatch.kernels import conv_im2col

    if direction not in conv_im2col.DIRECTIONS:
        return []
    return [(cfg.family, cfg.block_m, cfg.block_n, cfg.block_k, cfg.groups_per_program, cfg.num_warps,
             cfg.num_stages, cfg.kloop, cfg.align, cfg.split_k)
            for cfg in conv_im2col.candidate_configs("bf16", 2, direction)]


def _wgrad_igemm() -> list[tuple]:
    from tiledispatch.kernels import conv_wgrad

    return [("igemm", cfg.block_m, cfg.block_n, cfg.block_k, cfg.groups_per_program, cfg.num_warps,
             cfg.num_stages, cfg.kloop, cfg.align, cfg.split_k) for cfg in conv_wgrad.candidate_configs("bf16", 2)]


# Instances that were the fastest of the `_all` preset on some layer of the H200 conv suite
# (benchmarks/results/conv_h200.json: the 2026-11-23 run with pipelined direct kernels and the re-runs of its
# rows listed there) whose code no sweep had measured when they won (im2col; direct at 2 or 3 pipelined stages; 1x1
# on the tiled GEMM; bwd_weight 'diagrow' and 'taprow'; tma; among them the align-1 im2col instance of each
# direction that won the few-channel stems). The 2026-11-24 sweeps measured them and the shipped cost models
# rank them; they stay essential whether or not the greedy cover over the sweeps picks them.
SUITE_ESSENTIAL = {
    "fwd": frozenset({"direct-32x32x3-g1-w2-s3-roll-a8", "direct-32x64x3-g1-w4-s2-roll-a2",
                      "direct-32x64x3-g1-w4-s2-tap-a8", "direct-32x64x3-g1-w4-s3-roll-a2",
                      "direct-32x64x3-g1-w4-s3-tap-a8", "direct-64x32x3-g1-w4-s3-roll-a8",
                      "gemm-128x128x64-g1-w8-s4-im2col-a8-k1", "gemm-128x256x64-g1-w8-s3-im2col-a8-k1",
                      "gemm-128x64x64-g1-w4-s4-im2col-a8-k1", "gemm-64x128x64-g1-w4-s4-im2col-a8-k1",
                      "gemm-64x128x64-g1-w4-s4-im2col-a8-k4", "gemm-128x64x64-g1-w4-s4-im2col-a1-k1",
                      "gemm-64x128x64-g1-w4-s4-im2col-a8-k2", "gemm-128x128x64-g1-w8-s4-im2col-a8-k2",
                      "gemm-128x64x64-g1-w4-s4-tap-a8-k1", "gemm-128x128x64-g1-w8-s4-tap-a8-k1",
                      "gemm-64x64x64-g1-w4-s2-tap-a8-k1",
                      # tensor-copy boxes (2026-11-24 dense 2-D / 3-D re-run)
                      "tma-128x128x64-g1-w8-s3-tap-a8", "tma-128x64x64-g1-w4-s4-tap-a8",
                      "tma-128x64x64-g1-w4-s4-tap-a8-k4", "tma-64x64x64-g1-w4-s4-tap-a8-k8"}),
    "bwd_data": frozenset({"direct-256x32x1-g1-w8-s3-tap-a8", "direct-32x32x3-g1-w2-s3-roll-a8",
                           "direct-32x64x1-g1-w4-s2-tap-a8", "direct-32x64x3-g1-w4-s2-roll-a2",
                           "direct-32x64x3-g1-w4-s2-roll-a4", "direct-32x64x3-g1-w4-s2-tap-a4",
                           "direct-32x64x3-g1-w4-s3-tap-a8", "direct-64x32x1-g1-w4-s3-tap-a2",
                           "gemm-128x128x64-g1-w8-s4-im2col-a8-k1", "gemm-128x256x64-g1-w8-s3-im2col-a8-k1",
                           "gemm-128x64x64-g1-w4-s4-im2col-a8-k1", "gemm-64x128x64-g1-w4-s4-im2col-a8-k1",
                           "gemm-128x128x64-g1-w8-s4-im2col-a1-k1", "gemm-128x64x64-g1-w4-s4-tap-a8-k1",
                           "gemm-64x128x64-g1-w4-s4-tap-a8-k1", "gemm-64x64x64-g1-w4-s2-tap-a8-k1",
                           # tensor-copy boxes (2026-11-24 dense 2-D / 3-D re-run)
                           "tma-128x64x64-g1-w4-s4-tap-a8", "tma-128x128x64-g1-w8-s3-tap-a8",
                           "tma-256x128x64-g1-w8-s3-tap-a8", "tma-128x64x64-g1-w4-s4-tap-a8-k4",
                           "tma-64x64x64-g1-w4-s4-tap-a8-k8"}),
    "bwd_weight": frozenset({"direct-32x32x3-g1-w2-s3-tap-a8", "direct-32x32x3-g1-w4-s3-roll-a2",
                             "gemm-128x128x64-g1-w8-s3-im2col-a8-k1", "gemm-128x128x64-g1-w8-s3-im2col-a8-k2",
                             "gemm-128x256x64-g1-w8-s3-im2col-a8-k1", "gemm-64x128x64-g1-w4-s4-im2col-a8-k4",
                             "gemm-64x64x64-g1-w4-s4-im2col-a1-k32", "gemm-64x128x64-g1-w4-s4-im2col-a8-k1",
                             "gemm-64x128x64-g1-w4-s4-im2col-a8-k2", "gemm-64x128x64-g1-w4-s4-im2col-a8-k8",
                             "gemm-64x128x64-g1-w4-s4-im2col-a8-k16", "gemm-64x128x64-g1-w4-s4-tap-a8-k1",
                             "gemm-64x128x64-g1-w4-s4-tap-a8-k4", "gemm-64x128x64-g1-w4-s4-tap-a8-k16",
                             # filter rows per program (2026-11-24 re-runs of bwd_weight)
                             "igemm-64x64x32-g1-w4-s4-diagrow-a8", "igemm-64x64x64-g1-w8-s3-diagrow-a8",
                             "igemm-32x32x64-g1-w4-s3-diagrow-a8", "igemm-64x64x64-g1-w4-s3-taprow-a8",
                             "igemm-128x64x64-g1-w8-s3-taprow-a8", "igemm-32x32x64-g1-w4-s3-taprow-a8",
                             "tma-64x64x64-g1-w4-s3-taprow-a8", "tma-128x64x64-g1-w8-s3-taprow-a8",
                             "tma-32x32x64-g1-w4-s3-taprow-a8"}),
}
# 2-D 7x7 depthwise: the halo instances that were the fastest plan of `_all` on the layers of the depthwise7x7
# suite (H200: conv_depthwise7x7_halo_h200.json, 16 layers, and conv_depthwise7x7_named_h200_stop47.json); the
# essential tap kernels `auto` had there ran 0.6-0.7x of cuDNN in fwd where the halo pick runs 1.0-2.8x
HALO_ESSENTIAL = {
    "fwd": frozenset({"direct-16x32x7-g1-w4-s1-halo-a8", "direct-8x64x7-g1-w4-s1-halo-a8",
                      "direct-1x64x7-g1-w1-s1-halo-a8"}),
    "bwd_data": frozenset({"direct-16x32x7-g1-w4-s1-halo-a8", "direct-8x64x7-g1-w4-s1-halo-a8",
                           "direct-1x64x7-g1-w1-s1-halo-a8"}),
    "bwd_weight": frozenset({"direct-8x32x7-g1-w4-s1-halo-a8", "direct-4x64x7-g1-w2-s1-halo-a8",
                             "direct-2x64x7-g1-w2-s1-halo-a8", "direct-1x64x7-g1-w1-s1-halo-a8",
                             # the halofh instances that won layers of the suite (probe_halo_wgrad_h200_stop54.json)
                             "direct-16x32x7-g1-w4-s1-halofh-a8", "direct-7x32x7-g1-w2-s1-halofh-a8",
                             "direct-7x32x7-g1-w4-s1-halofh-a8-k2", "direct-7x64x7-g1-w4-s1-halofh-a8-k2",
                             "direct-8x64x7-g1-w4-s1-halofh-a8"}),
}


@functools.cache
def essential_keys(direction: str) -> frozenset[str]:
    """The instances tools/derive_conv_essential.py chose from the sweeps (tools/conv_essential.json)."""
    if not ESSENTIAL.exists():
        raise SystemExit(f"{ESSENTIAL} is missing: run tools/derive_conv_essential.py first")
    return frozenset(json.loads(ESSENTIAL.read_text())[direction]["chosen"])


# family direct: software-pipelined load stages of the main loop (kernels/conv_common.loop_range; 1: a plain
# loop). Every direct row of an `_all` preset comes in each (pipelining spills the registers of some tiles).
DIRECT_STAGES = (1, 2, 3)


def _with_direct_stages(rows: list[tuple]) -> list[tuple]:
    out = []
    for row in rows:
        expand = row[0] == "direct" and row[7] not in ("halo", "halofh")
        variants = [(*row[:6], s, *row[7:]) for s in DIRECT_STAGES] if expand else [row]
        out += [v for v in variants if v not in out]
    return out


def rows_for(direction: str, stage_variants: bool = False) -> list[tuple]:
    """Every candidate row of a direction, split_k included (0 where the row leaves it out); stage_variants:
    each direct row in every DIRECT_STAGES."""
    wgrad = _wgrad_igemm() + DIRECT_WGRAD + ROLL_WGRAD + GEMM_1X1_WGRAD + TMA_WGRAD + HALOFH
    rows = (wgrad if direction == "bwd_weight"
            else IGEMM + DIAG + DIRECT_SPATIAL + GEMM_1X1 + TMA) + _im2col(direction) + HALO
    rows = [row if len(row) == 10 else (*row, 0) for row in rows]
    return _with_direct_stages(rows) if stage_variants else rows


def configs(direction: str, dtype: str, ndim: int, essential_only: bool) -> list[ConvConfig]:
    """The valid instances of a preset; essential: the derived ones, the suite winners (2-D / 3-D presets) and
    the tap-loop instances below align 8 at their listed stages (the fallbacks for problems no align-8 instance
    can take)."""
    from derive_conv_essential import instance_key

    arch = get_arch("sm_90")
    suite = SUITE_ESSENTIAL[direction] if ndim > 1 else frozenset()   # the suites measured 2-D and 3-D layers
    suite |= HALO_ESSENTIAL[direction] if ndim == 2 else frozenset()
    chosen = essential_keys(direction) | suite if essential_only else frozenset()
    listed = set(rows_for(direction))   # the fallbacks below align 8 at their listed stages only
    out = []
    for row in rows_for(direction, stage_variants=True):
        family, bm, bn, bk, gpp, warps, stages, kloop, align, split = row
        fallback = row in listed and align != 8 and kloop not in ("roll", "im2col", "halo", "halofh")
        if essential_only and not fallback and instance_key(row) not in chosen:
            continue
        if dtype == "fp32":
            stages = min(stages, 2)
        cfg = ConvConfig(family=family, direction=direction, ndim=ndim, dtype=dtype, block_m=bm, block_n=bn,
                         block_k=bk, groups_per_program=gpp, num_warps=warps, num_stages=stages, kloop=kloop,
                         align=align, split_k=split)
        if not config_errors(cfg, arch) and cfg not in out:
            out.append(cfg)
    return out


def main() -> None:
    for direction in DIRECTIONS:
        for dtype in DTYPES:
            for ndim in (1, 2, 3):
                for kind in ("essential", "all"):
                    name = f"conv_{direction}_{dtype}_{ndim}d_{kind}"
                    listed = configs(direction, dtype, ndim, kind == "essential")
                    data = {"name": name, "op": "conv", "direction": direction, "dtype": dtype, "ndim": ndim,
                            "arch": "sm_90", "description": __doc__.split("\n\n")[1].replace("\n", " "),
                            "configs": [c.name for c in listed]}
                    (OUT / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
                    print(f"{name}: {len(listed)}")


if __name__ == "__main__":
    main()
