"""tools/rules_offline.py: the strategy's pick among a preset's plans is looked up in a sweep's measured
timings; `auto` and `rules` both pick a plan the sweep timed, and the ratios follow from those times."""
from __future__ import annotations

import pytest

from tiledispatch.presets import load_preset


@pytest.fixture(scope="module")
def ro(load_script):
    return load_script("tools/rules_offline.py")


def _sweep(slow_name: str) -> dict:
    """One aligned bf16 rcr shape; every essential instance timed at 2 ms except `slow_name` at 8 ms."""
    names = [cfg.name for cfg in load_preset("gemm_bf16_rcr_essential")]
    timings = {n: {"ms": 8.0 if n == slow_name else 2.0} for n in names}
    return {"rows": [{"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "rcr", "cublas_ms": 2.0,
                      "timings": timings}]}


@pytest.mark.parametrize("strategy", ["rules", "auto"])
def test_the_pick_is_timed_from_the_sweep(ro, strategy):
    result = ro.evaluate(_sweep(""), "gemm_bf16_rcr_essential", strategy)
    assert result["best_geomean"] == pytest.approx(1.0) and result["auto_geomean"] == pytest.approx(1.0)
    (line,) = result["lines"]
    picked = line.split()[-1]
    slow = next(cfg.name for cfg in load_preset("gemm_bf16_rcr_essential") if cfg.name == picked)
    again = ro.evaluate(_sweep(slow), "gemm_bf16_rcr_essential", strategy)   # its pick made 4x slower
    assert again["auto_geomean"] == pytest.approx(0.25) and again["best_geomean"] == pytest.approx(1.0)
