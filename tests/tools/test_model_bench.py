"""The model benchmark's pieces without a GPU (benchmarks/models.py, model_measure.py, model_report.py), the
layer extractor (tools/extract_model_layers.py) on a small model, and the project's X3D-M definition."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    """benchmarks/ and tools/ on sys.path (the scripts import their neighbours by module name)."""
    for folder in ("benchmarks", "tools"):
        if str(ROOT / folder) not in sys.path:
            sys.path.insert(0, str(ROOT / folder))
    return {name: importlib.import_module(name) for name in ("models", "model_measure", "model_report",
                                                              "extract_model_layers")}


@pytest.mark.parametrize(("name", "expected"), [
    ("conv_igemm_kernel", "tiledispatch"),
    ("gemm_tma_kernel", "tiledispatch"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
     "vendor_conv_gemm"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", "vendor_conv_gemm"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__nv_bfloat16, float>", "norm"),
    ("triton_per_fused__native_batch_norm_legit_functional_convolution_backward_12", "norm"),
    ("triton_poi_fused_convolution_backward_relu_threshold_backward_7", "elementwise"),
    ("triton_red_fused_sum_3", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "elementwise"),
    ("void nchwToNhwcKernel<__nv_bfloat16>", "layout_copy"),
    ("Memcpy DtoD (Device -> Device)", "layout_copy"),
    ("void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float>>>", "reduction"),
])
def test_kernel_classes(bench, name, expected):
    assert bench["model_measure"].kernel_class(name) == expected


def _row(model: str, group: str, stock: float, converted: float, file: str = "") -> dict:
    runs = {"train": {"stock_eager": {"wall_ms": stock, "gpu_ms": stock / 2, "file": file},
                      "converted_eager": {"wall_ms": converted, "gpu_ms": converted / 2, "file": file}}}
    return {"model": model, "group": group, "runs": runs}


def test_speedups_summary_and_acceptance(bench):
    report = bench["model_report"]
    rows = [_row("resnet50", "2d-dense", 10.0, 8.0), _row("mobilenet_v2", "2d-dw-grouped", 9.0, 10.0),
            {"model": "broken", "group": "2d-dense", "error": "ImportError: no timm"}]
    for row in rows:
        row["speedups"] = report.speedups(row)
    assert rows[0]["speedups"]["train"]["eager_wall"] == pytest.approx(1.25)
    summary = report.summary(rows)
    assert summary["train_eager"]["min_model"] == "mobilenet_v2"
    assert summary["train_eager"]["group_geomean"] == pytest.approx(0.9)
    assert summary["acceptance"]["every_model_eager_ge_1"] is False
    assert summary["acceptance"]["every_model_compiled_ge_1"] is None   # nothing compiled: no verdict
    assert summary["failures"] == ["broken: ImportError: no timm"]
    text = report.markdown({"models": rows, "summary": summary, "settings": {}})
    assert "| resnet50 |" in text and "1.25× (1.25×)" in text


def test_merge_takes_each_stock_converted_pair_from_one_file(bench, tmp_path):
    models = bench["models"]
    a = _row("resnet50", "2d-dense", 10.0, 8.0, "a")
    a["runs"]["train"]["converted_eager"] = {"skipped": "time budget (--budget-s) spent"}
    b = _row("resnet50", "2d-dense", 11.0, 9.0, "b")
    paths = []
    for name, row in (("a", a), ("b", b)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"gpu": "NVIDIA H100", "date": name, "argv": [], "models": [row]}))
        paths.append(path)
    merged = models.merge(paths, tmp_path / "merged.json")
    runs = merged["models"][0]["runs"]["train"]
    assert runs["stock_eager"]["file"] == runs["converted_eager"]["file"] == "b"
    assert (tmp_path / "merged.md").is_file()


def test_extract_records_deduplicated_layers_and_uncalled_ones(bench):
    ex = bench["extract_model_layers"]

    class Same(nn.Conv2d):   # a subclass: recorded with its own class name
        pass

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(4, 4, 3, padding="same", groups=4)
            self.b = nn.Conv2d(4, 4, 3, padding="same", groups=4)   # the same configuration as a
            self.c = Same(4, 8, 1, stride=2, bias=False)
            self.unused = nn.Linear(3, 3)
            self.head = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.c(self.b(self.a(x)))
            return self.head(y.mean((2, 3)))

    layers, uncalled = ex.extract(Net(), torch.randn(1, 4, 6, 6))
    assert [layer["layer"] for layer in layers] == ["a", "c", "head"] and layers[0]["count"] == 2
    assert layers[0]["padding"] == "same" and layers[0]["groups"] == 4
    assert layers[0]["input_shape"] == [1, 4, 6, 6]
    assert layers[1]["class"].endswith("Same") and layers[1]["op"] == "Conv2d"
    assert layers[1]["stride"] == [2, 2]
    assert layers[2]["input_shape"] == [1, 8] and layers[2]["out_features"] == 2
    assert uncalled == ["unused"]


def test_model_lists_are_long_enough(bench):
    assert len(bench["extract_model_layers"].MODELS) >= 30
    names = {m.name for m in bench["models"].MODELS}
    assert len(names) >= 10 and {"x3d_m", "resnet50", "r2plus1d_18", "mobilenet_v2"} <= names


def test_x3d_m_follows_the_published_layer_table():
    from tiledispatch.testing.x3d import x3d_m

    model = x3d_m()
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(3.79e6, rel=0.01)   # paper: 3.8 M
    assert [len(stage) for stage in model.stages] == [3, 5, 11, 7]
    assert [stage[0].conv_c[0].out_channels for stage in model.stages] == [24, 48, 96, 192]
    # inner width 2.25x, channel-wise 3x3x3
    assert [stage[0].conv_b[0].groups for stage in model.stages] == [54, 108, 216, 432]
    se = [not isinstance(block.se, nn.Identity) for block in model.stages[2]]
    assert se == [i % 2 == 0 for i in range(11)]
    with torch.device("meta"):
        out = x3d_m()(torch.empty(2, 3, 16, 224, 224))
    assert out.shape == (2, 400)
