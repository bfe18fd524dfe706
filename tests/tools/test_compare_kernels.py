"""tools/compare_kernels.py: two variants' kernels grouped by stem (Inductor's per-graph number dropped)."""
from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/compare_kernels.py")


def _variant(kernels, by_class):
    return {"gpu_ms": sum(k[1] for k in kernels), "by_class_ms": by_class,
            "top_kernels": [{"name": n, "ms": ms, "calls": c, "class": cls} for n, ms, c, cls in kernels]}


def test_stems_and_the_largest_difference_first(tool, tmp_path, capsys):
    assert tool.stem("triton_red_fused_bn_backward_60") == "triton_red_fused_bn_backward"
    assert tool.stem("sm90_xmma_fprop_12") == "sm90_xmma_fprop_12"      # only Inductor's names are numbered
    a = _variant([("triton_red_fused_bn_backward_7", 0.2, 3, "norm"), ("cudnn_dgrad", 0.5, 16, "vendor")],
                 {"norm": 0.2, "vendor": 0.5})
    b = _variant([("triton_red_fused_bn_backward_60", 0.3, 2, "norm"),
                  ("triton_red_fused_bn_backward_61", 0.1, 1, "norm"),
                  ("gemm_tiled_kernel", 0.1, 48, "ours")], {"norm": 0.4, "ours": 0.1})
    rows = tool.compare(a, b)
    assert [r["stem"] for r in rows] == ["cudnn_dgrad", "triton_red_fused_bn_backward", "gemm_tiled_kernel"]
    bn = rows[1]
    assert (bn["a_calls"], bn["b_calls"]) == (3, 3) and bn["delta_ms"] == pytest.approx(0.2)
    result = {"models": [{"model": "m", "runs": {"train": {"stock_compiled": a, "converted_compiled": b}}}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    assert tool.main([str(path), "--model", "m"]) == 0
    out = capsys.readouterr().out
    assert "norm" in out and "+0.200" in out and "triton_red_fused_bn_backward" in out
    with pytest.raises(SystemExit):
        tool.main([str(path), "--model", "m", "--b", "no_such_variant"])
