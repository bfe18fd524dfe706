"""benchmarks/models.py --vendor-off-gpu without a GPU: the option reaches the settings, vendor_off sets the
variables and fresh registries for its block only, and the report shows and merges the vendor-off GPU time."""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return {name: importlib.import_module(name) for name in ("models", "model_report", "model_vendor_off")}


def test_vendor_off_is_undone(bench, monkeypatch) -> None:
    from tiledispatch import settings
    from tiledispatch.dispatch import defaults

    monkeypatch.setenv("TILEDISPATCH_VENDOR", "1")
    monkeypatch.delenv("TILEDISPATCH_TUNING_DB", raising=False)
    marker, key = object(), ("vendor-off-test",)
    defaults.install(key, marker)
    try:
        reinstalled = []
        with bench["model_vendor_off"].vendor_off(lambda: reinstalled.append(True)):
            assert settings.vendor_plans() is False and reinstalled == [True]
            assert key not in defaults.registries() and "TILEDISPATCH_TUNING_DB" in os.environ
        assert settings.vendor_plans() is True and "TILEDISPATCH_TUNING_DB" not in os.environ
        assert defaults.registries()[key] is marker
    finally:
        defaults.reset()


def test_option_reaches_the_settings(bench) -> None:
    ns = bench["models"].build_parser().parse_args(["--smoke", "--phases", "infer", "--no-numerics",
                                                    "--vendor-off-gpu"])
    assert bench["models"].settings_from(ns).vendor_off_gpu is True


def test_report_column_and_merge(bench, tmp_path) -> None:
    report = bench["model_report"]
    key = bench["model_vendor_off"].KEY
    row = {"model": "resnet50", "group": "2d-dense", "input_shape": [32, 3, 224, 224],
           "runs": {"train": {"stock_eager": {"wall_ms": 10.0, "gpu_ms": 9.0},
                              "converted_eager": {"wall_ms": 8.0, "gpu_ms": 7.0},
                              key: {"wall_ms": 8.5, "gpu_ms": 7.25, "by_class_ms": {}}}}}
    row["speedups"] = report.speedups(row)
    text = report.markdown({"models": [row], "summary": report.summary([row]), "settings": {}})
    assert "GPU, vendor off" in text and "| 8.0 (7.0) | 7.2 |" in text
    plain = json.loads(json.dumps(row))
    del plain["runs"]["train"][key]
    paths = []
    for name, data in (("a", plain), ("b", row)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"gpu": "NVIDIA H100", "date": name, "argv": [], "models": [data]}))
        paths.append(path)
    merged = report.merge(paths, tmp_path / "merged.json")
    assert merged["models"][0]["runs"]["train"][key]["gpu_ms"] == 7.25
