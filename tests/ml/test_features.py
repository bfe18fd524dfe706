"""CPU lane: the cost model's feature spec and the two ways features are computed (dataset rows, run time).

Samples (tests/ml/data/*_sample, datasets with a manifest): 60 problems of data/h200/gemm_bf16_rcr and 66 of
data/h200/conv_fwd_bf16 (the first 40 and the first 20 random ones, file order; conv also its first 6 ResNeXt
layers with a block-diagonal kernel) with every row of them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch.arch.spec import get_arch
from tiledispatch.bench.dataset import load_frame
from tiledispatch.bench.schema import problem_from_json
from tiledispatch.errors import BadInput
from tiledispatch.ml.features import (
    feature_frame,
    feature_names,
    features_for,
    spec_dict,
    spec_version,
)
from tiledispatch.ml.model import ModelMismatch, check_spec

DATA = Path(__file__).parent / "data"
SAMPLES = {"gemm": DATA / "gemm_bf16_rcr_sample", "conv": DATA / "conv_fwd_bf16_sample"}
ARCH = get_arch("sm_90").with_device(132, "NVIDIA H200")


def _ok_rows(op: str):
    frame = load_frame(SAMPLES[op])
    return frame[(frame["status"] == "ok") & (frame["family"] != "vendor")].reset_index(drop=True)


@pytest.mark.parametrize("op", ["gemm", "conv"])
def test_spec_round_trip(op):
    spec = spec_dict(op)
    version = spec_version(op)
    assert isinstance(spec["version"], int) and spec["version"] == version
    again = json.loads(json.dumps(spec))
    assert again == spec and tuple(again["names"]) == feature_names(op)
    assert len(set(spec["names"])) == len(spec["names"])
    check_spec({"op": op, "feature_spec": again}, version, "test")   # accepted
    check_spec({"op": op, "feature_spec": again}, None, "test")      # None: this tiledispatch's version
    with pytest.raises(ModelMismatch):
        check_spec({"op": op, "feature_spec": {**again, "version": version + 1}}, None, "test")
    with pytest.raises(ModelMismatch):   # same version, other names: refused too
        check_spec({"op": op, "feature_spec": {**again, "names": again["names"][::-1]}}, version, "test")


def test_spec_of_an_unknown_op():
    with pytest.raises(BadInput) as err:
        spec_dict("fft")
    assert err.value.field == "op"


@pytest.mark.parametrize("op", ["gemm", "conv"])
def test_features_for_equals_feature_frame(op):
    """Run-time features (objects through schema.problem_columns / config_columns) == dataset features."""
    rows = _ok_rows(op)
    frame = feature_frame(rows, ARCH)
    assert list(frame.columns) == list(feature_names(op)) and np.isfinite(frame.to_numpy()).all()
    for problem_json in rows["problem_json"].unique()[:12]:
        sub = rows[rows["problem_json"] == problem_json]
        configs = [td.parse_name(name) for name in sub["kernel"]]
        runtime = features_for(problem_from_json(problem_json), configs, ARCH)
        np.testing.assert_allclose(runtime.to_numpy(), frame.loc[sub.index].to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("op", ["gemm", "conv"])
def test_features_never_read_names(op):
    """Kernel names, problem signatures and JSON are no inputs: scrambling or dropping them changes nothing"""
    rows = _ok_rows(op)
    expected = feature_frame(rows, ARCH)
    scrambled = rows.drop(columns=["problem_json", "problem"]).assign(kernel="x", tag="y")
    np.testing.assert_array_equal(feature_frame(scrambled, ARCH).to_numpy(), expected.to_numpy())


def test_gemm_padded_flag_matches_the_sweep():
    """The padded feature (derived from p_align / c_align / family) is what the sweep recorded."""
    rows = _ok_rows("gemm")
    frame = feature_frame(rows, ARCH)
    assert rows["padded"].any()
    assert (frame["padded"].to_numpy() == rows["padded"].to_numpy()).all()


def test_features_depend_on_the_arch():
    rows = _ok_rows("gemm").head(50)
    few_sms = feature_frame(rows, ARCH.with_device(66, "half"))
    full = feature_frame(rows, ARCH)
    assert (few_sms["waves"] > full["waves"]).all() and (few_sms["sm_count"] == 66).all()


def test_vendor_rows_are_refused():
    frame = load_frame(SAMPLES["gemm"])
    with pytest.raises(BadInput) as err:
        feature_frame(frame, ARCH)
    assert err.value.field == "family"


def test_features_for_refuses_a_config_of_another_op():
    problem = td.GemmProblem(64, 64, 64, dtype="bf16")
    with pytest.raises(BadInput) as err:
        features_for(problem, [td.ConvConfig()], ARCH)
    assert err.value.field == "op"
    assert features_for(problem, [], ARCH).shape == (0, len(feature_names("gemm")))


def test_block_diagonal_and_unrolled_views():
    """diag tiles span every group (tiles_n over all K channels, one dot per tap, BN / BK times the useful
    work); a direct kernel's block_k is its unroll factor; other kernels have neither flag."""
    rows = _ok_rows("conv")
    frame = feature_frame(rows, ARCH)
    diag = (rows["c_kloop"] == "diag").to_numpy()
    assert diag.any() and (frame["kloop_diag"].to_numpy() == diag).all()
    d, f = rows[diag], frame[diag]
    taps = d["p_filter_0"] * d["p_filter_1"].where(d["p_ndim"] > 1, 1) * d["p_filter_2"].where(d["p_ndim"] > 2, 1)
    np.testing.assert_array_equal(f["k_iters"], taps)
    np.testing.assert_array_equal(f["tiles_n"], np.ceil(d["p_k"] / d["c_block_n"]))
    np.testing.assert_array_equal(f["waste_g"], d["c_block_n"] / d["c_block_k"])
    direct = (rows["family"] == "direct").to_numpy()
    assert (frame["unroll"][direct] == rows["c_block_k"][direct]).all()
    assert (frame["unroll"][~direct] == 1).all() and (rows["c_block_k"][direct] > 1).any()


def test_every_conv_kernel_kind_has_features_of_its_own():
    """Kernels that differ only in their k-loop (tap / roll / halo on a depthwise layer) or in the 1x1 GEMM's
    path (split_k 0: TMA persistent, 1: tiled) get different feature rows; before spec 4 they were the same
    row, and the model ranked a slow kind as high as a fast one."""
    from tiledispatch.configs.conv import ConvConfig

    names = feature_names("conv")
    depthwise = td.ConvProblem("fwd", 8, 96, 96, 96, (28, 28), (7, 7), 1, 3, 1, "bf16")
    direct = [ConvConfig(family="direct", direction="fwd", ndim=2, dtype="bf16", block_m=8, block_n=64,
                         block_k=7, num_warps=4, num_stages=1, kloop=kloop, align=8)
              for kloop in ("tap", "roll", "halo")]
    rows = features_for(depthwise, direct, ARCH)
    kinds = [names.index(n) for n in ("kloop_roll", "kloop_halo")]
    assert [tuple(row[kinds]) for row in np.asarray(rows)] == [(0, 0), (1, 0), (0, 1)]
    pointwise = td.ConvProblem("fwd", 8, 256, 256, 1, (14, 14), (1, 1), 1, 0, 1, "bf16")
    gemm = [ConvConfig(family="gemm", direction="fwd", ndim=2, dtype="bf16", block_m=128, block_n=128,
                       block_k=64, num_warps=8, num_stages=4, kloop="tap", align=8, split_k=split)
            for split in (0, 1)]
    tiled = names.index("gemm_tiled")
    assert [row[tiled] for row in np.asarray(features_for(pointwise, gemm, ARCH))] == [0, 1]


def test_halofh_is_told_apart_from_halo():
    """A bwd_weight halofh kernel and a halo kernel of the same tile were one feature row under conv spec 4
    (no kloop_halofh), so a model could not rank the two kinds apart."""
    from tiledispatch.configs.conv import ConvConfig

    names = feature_names("conv")
    depthwise = td.ConvProblem("bwd_weight", 8, 96, 96, 96, (28, 28), (7, 7), 1, 3, 1, "bf16")
    direct = [ConvConfig(family="direct", direction="bwd_weight", ndim=2, dtype="bf16", block_m=8, block_n=64,
                         block_k=7, num_warps=4, num_stages=1, kloop=kloop, align=8)
              for kloop in ("tap", "halo", "halofh")]
    rows = np.asarray(features_for(depthwise, direct, ARCH))
    kinds = [names.index(n) for n in ("kloop_halo", "kloop_halofh")]
    assert [tuple(row[kinds]) for row in rows] == [(0, 0), (1, 0), (0, 1)]
    assert not np.array_equal(rows[1], rows[2])


@pytest.mark.parametrize("direction, spatial", [("fwd", (14, 14)), ("bwd_data", (13, 13)), ("fwd", (4, 14, 14))])
def test_tma_tiles_are_the_kernels_pixel_boxes(direction, spatial):
    """Family tma tiles one image's pixels into boxes (kernels/conv_tma.tiles). Up to conv spec 5 the
    features counted flat rows: a 256-pixel tile on 14x14 images looked full where its 32x8 boxes are 38%
    full, and the models picked it on such layers at 64% of the best plan's speed."""
    from tiledispatch.configs.conv import ConvConfig
    from tiledispatch.kernels import conv_tma

    ndim = len(spatial)
    problem = td.ConvProblem(direction, 64, 304, 304, 1, spatial, (3,) * ndim, 1, 1, 1, "bf16")
    configs = [ConvConfig(family="tma", direction=direction, ndim=ndim, dtype="bf16", block_m=bm, block_n=128,
                          block_k=64, num_warps=w, num_stages=3, kloop="tap", align=8)
               for bm, w in ((256, 8), (128, 4))]
    frame = features_for(problem, configs, ARCH)
    for cfg, (_, row) in zip(configs, frame.iterrows()):
        assert row["tiles_m"] == conv_tma.pixel_tiles(cfg, problem)
        assert row["tiles_m"] * row["tiles_n"] == conv_tma.tiles(cfg, problem)
        assert row["waste_m"] == pytest.approx(row["tiles_m"] * cfg.block_m / (64 * np.prod(spatial)))
    assert (frame["waste_m"] > 1.3).all()   # flat rows: 12544 or 50176 pixels fill 256-pixel tiles exactly


def test_tma_bwd_weight_steps_are_its_pixel_boxes():
    """bwd_weight tma (kloop taprow) reduces over boxes of block_k pixels of one image
    (kernels/conv_tma_wgrad.boxes), split into SPLITS ranges."""
    from tiledispatch.configs.conv import ConvConfig
    from tiledispatch.kernels import conv_tma_wgrad

    problem = td.ConvProblem("bwd_weight", 8, 64, 64, 1, (14, 14), (3, 3), 1, 1, 1, "bf16")
    cfg = ConvConfig(family="tma", direction="bwd_weight", ndim=2, dtype="bf16", block_m=64, block_n=64,
                     block_k=64, num_warps=4, num_stages=3, kloop="taprow", align=8)
    row = features_for(problem, [cfg], ARCH).iloc[0]
    splits = row["splits"]
    assert row["k_iters"] == np.ceil(conv_tma_wgrad.boxes(cfg, problem) / max(splits, 1))
