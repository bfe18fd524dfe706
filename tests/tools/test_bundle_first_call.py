"""tools/bundle_first_call.py on the CPU: a fresh process runs td.gemm and td.conv* (every direction) from a
bundle, strictly, with 0 kernels compiled. The bundle's four essential presets are one-kernel stand-ins
(the packaged ones are 15-54 kernels each)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiledispatch.bundle import export
from tiledispatch.testing import small_config
from tiledispatch.testing import small_defaults as small

pytestmark = pytest.mark.slow
TOOL = Path(__file__).resolve().parents[2] / "tools" / "bundle_first_call.py"
STAND_INS = {"gemm_fp16_rcr_essential": small_config(),
             **{f"conv_{d}_fp16_2d_essential": small.config(small.conv_key(d, "fp16", 2))
                for d in ("fwd", "bwd_data", "bwd_weight")}}


def test_first_calls_from_a_bundle_compile_nothing(isolated_cache, tmp_path, monkeypatch):
    from tiledispatch import presets

    for module in (presets, export):   # the stand-in presets, as export writes the packaged ones
        monkeypatch.setattr(module, "load_preset", lambda name: [STAND_INS[name]])
    monkeypatch.setattr(export, "preset_text", lambda name: json.dumps({"configs": [STAND_INS[name].name]}))
    report = export.export_bundle(tmp_path / "bundle", list(STAND_INS), arch="sm_90",
                                  cache_dir=isolated_cache, max_workers=2)
    out = tmp_path / "first_call.json"
    result = subprocess.run([sys.executable, str(TOOL), "--bundle", report.path, "--device", "cpu", "--dtype",
                             "fp16", "--skip-cold", "--out", str(out)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    data = json.loads(out.read_text())["bundle"]
    assert data["compiled"] == 0 and data["bundle"]["served"] == 4
    assert set(data["calls"]) == {"gemm", "conv_fwd", "conv_bwd_data", "conv_bwd_weight"}
    assert all(call["compiled"] == 0 and call["rel_err"] < 1e-2 for call in data["calls"].values())
    assert "0 kernels compiled" in result.stdout
