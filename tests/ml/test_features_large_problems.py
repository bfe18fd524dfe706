"""Features of problems whose FLOPs or bytes exceed int64 (D8): such Python ints made object columns that the
numeric view dropped, and the cost model failed with KeyError: 'flops' / 'min_bytes'."""
from __future__ import annotations

import math

import numpy as np

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.ml.features import feature_names, features_for

ARCH = td.get_arch("sm_90")


def test_gemm_flops_above_int64():
    problem = td.GemmProblem(2**31 - 1, 2**17, 2**17)     # within every bound; 2**66 FLOPs
    assert problem.flops > 2**63
    configs = [td.GemmConfig(dtype="bf16"), td.GemmConfig(dtype="bf16", block_m=64)]
    frame = features_for(problem, configs, ARCH)
    assert list(frame.columns) == list(feature_names("gemm")) and len(frame) == 2
    assert np.isfinite(frame.to_numpy()).all()
    assert math.isclose(frame["log_flops"].iloc[0], math.log2(problem.flops))


def test_conv_flops_above_int64():
    problem = td.ConvProblem("fwd", 2**16, 2**14, 2**14, 1, (2**8, 2**8), (3, 3), padding=1)
    assert problem.flops > 2**63
    frame = features_for(problem, [ConvConfig()], ARCH)
    assert np.isfinite(frame.to_numpy()).all()
