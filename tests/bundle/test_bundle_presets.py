"""Slow CPU lane: the issue's scenario on real presets. Export two essential presets for sm_90, then a fresh
process with an empty cache and TILEDISPATCH_BUNDLE runs td.gemm and td.conv (Triton's interpreter) with zero
kernels compiled."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tiledispatch as td
from tiledispatch.bundle.export import export_bundle
from tiledispatch.presets import load_preset

pytestmark = pytest.mark.slow
PRESETS = ("gemm_fp16_rcr_essential", "conv_fwd_fp16_2d_essential")


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The kernels of PRESETS, which the export builds, on the session's prebuild
    worker."""
    out = []
    for name in PRESETS if items else ():
        registry = td.Registry("sm_90")
        registry.add_preset(name)
        out.append(registry)
    return out

FRESH_PROCESS = """
import json, torch, tiledispatch as td
from tiledispatch.build.pool import compilations
from tiledispatch.bundle.active import current
from tiledispatch.dispatch import defaults

a, b = torch.randn(40, 72, dtype=torch.float16), torch.randn(24, 72, dtype=torch.float16).t()
y = td.gemm(a, b)
cl = torch.channels_last
x = torch.randn(2, 8, 6, 6, dtype=torch.float16).contiguous(memory_format=cl)
w = torch.randn(8, 2, 3, 3, dtype=torch.float16).contiguous(memory_format=cl)
z = td.conv(x, w, padding=1, groups=4)
ref = torch.nn.functional.conv2d(x.float(), w.float(), padding=1, groups=4)
print(json.dumps({"compiled": compilations(), "stats": current().stats(),
                  "gemm_err": (y.float() - a.float() @ b.float()).abs().max().item(),
                  "conv_err": (z.float() - ref).abs().max().item(),
                  "registries": [sum(1 for k in r if k.config.family != "vendor") for r in
                                 defaults.registries().values()]}))
"""


def test_a_fresh_process_runs_td_gemm_and_td_conv_from_the_bundle_compiling_nothing(tmp_path, prebuild):
    prebuild.claim(__name__)
    report = export_bundle(tmp_path / "bundle", PRESETS, arch="sm_90", max_workers=2)
    kernels = sum(len(load_preset(name)) for name in PRESETS)
    assert report.kernels == kernels   # fp16 convs are ranked by the bf16 conv model (cost_model.STAND_IN)
    assert sorted(report.models) == ["sm_90/conv_fwd_bf16", "sm_90/gemm_none_fp16"]
    env = {**os.environ, "TILEDISPATCH_BUNDLE": report.path, "TILEDISPATCH_BUNDLE_STRICT": "1",
           "TILEDISPATCH_CACHE_DIR": str(tmp_path / "empty-cache"), "TRITON_CACHE_DIR": str(tmp_path / "t")}
    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["compiled"] == 0 and seen["stats"]["compiled"] == 0
    assert seen["stats"]["served"] == kernels and sorted(seen["registries"]) == sorted(
        len(load_preset(name)) for name in PRESETS)
    assert seen["gemm_err"] < 0.1 and seen["conv_err"] < 0.1
    assert not (tmp_path / "empty-cache" / "sm_90").exists()
