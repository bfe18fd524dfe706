"""td.gemm end to end on CPU tensors: the default registry (essential preset, specialised to the epilogue) is
built once on first use (~27 compiles), then reused."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch import api
from tiledispatch.dispatch import defaults
from tiledispatch.presets import load_preset
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing import check_against_reference, matrix, poisoned, vector

pytestmark = pytest.mark.slow
EPILOGUE = td.Epilogue("relu", "col")


@pytest.fixture(scope="module")
def first_call():
    a = matrix(100, 64, dtype="fp16")
    b = matrix(64, 48, letter="c", dtype="fp16")
    bias = vector(48, dtype="fp16")
    before = set(defaults.registries())
    out = td.gemm(a, b, bias=bias, activation="relu")
    return a, b, bias, out, before


def test_first_call_builds_the_default_registry_and_is_correct(first_call):
    a, b, bias, out, before = first_call
    check_against_reference(out, GemmArgs(a, b, bias=bias, bias_mode="col", activation="relu"), "fp16")
    key = ("gemm", "fp16", "rcr", EPILOGUE)
    assert key in defaults.registries() and key not in before
    registry = defaults.registries()[key]
    ours = [k for k in registry if k.config.family != "vendor"]
    assert len(ours) == len(load_preset("gemm_fp16_rcr_essential")) and all(k.built for k in registry)
    assert {k.config.epilogue for k in ours} == {EPILOGUE}
    assert {k.name for k in registry} - {k.name for k in ours} == {"vendor-cublas-gemm"}
    assert {"tiled", "tma_persistent"} <= {k.config.family for k in registry}


@pytest.mark.parametrize("m, n, k, batch", [(33, 20, 17, None), (1, 48, 96, None), (64, 32, 128, 2),
                                            (7, 5, 300, 3)])
def test_later_calls_reuse_it(first_call, m, n, k, batch):
    registry = defaults.registries()[("gemm", "fp16", "rcr", EPILOGUE)]
    count = len(defaults.registries())
    a = matrix(m, k, dtype="fp16", batch=batch)
    b = matrix(k, n, letter="c", dtype="fp16", batch=batch)
    bias = vector(n, dtype="fp16")
    out = poisoned(((batch,) if batch else ()) + (m, n), "fp16")
    result = td.gemm(a, b, bias=bias, activation="relu", out=out, alpha=0.5)
    assert result.data_ptr() == out.data_ptr()
    check_against_reference(out, GemmArgs(a, b, bias=bias, bias_mode="col", activation="relu", alpha=0.5), "fp16")
    assert len(defaults.registries()) == count and defaults.registries()[("gemm", "fp16", "rcr", EPILOGUE)] is registry
    problem = td.GemmProblem(m, n, k, batch or 1, dtype="fp16", epilogue=EPILOGUE)
    assert api.default_registry(problem) is registry


def test_default_cache_is_the_session_tmp_dir(first_call, isolated_cache):
    registry = defaults.registries()[("gemm", "fp16", "rcr", EPILOGUE)]
    compiled = [k for k in registry if k.config.family != "vendor"]   # the vendor plan compiles nothing
    assert compiled and all(k.entry_dir.is_relative_to(isolated_cache) for k in compiled)
