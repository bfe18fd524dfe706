"""CPU lane: `tiledispatch train` and `tiledispatch validate` on the committed GEMM sample (tests/ml/data)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import invoke

DATA = Path(__file__).parents[1] / "ml" / "data"
GEMM, CONV = DATA / "gemm_bf16_rcr_sample", DATA / "conv_fwd_bf16_sample"


def _ok(result):
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("ml") / "gemm"
    data = json.loads(_ok(invoke("train", "--data", GEMM, "--out", out, "--kind", "ranker", "--seed", "3",
                                 "--json")))
    assert data["kind"] == "ranker" and data["holdout_problems"] == 12 and data["problems"] == 48
    assert set(data["cv"]) == {"ranker"} and len(data["cv"]["ranker"]["folds"]) == 5
    return out


def test_train_table(tmp_path):
    out = _ok(invoke("train", "--data", CONV, "--out", tmp_path / "conv", "--holdout", "0.25"))
    assert "ranker" in out and "regressor" in out and "17 problems held out" in out   # ceil(0.25 * 66)
    assert (tmp_path / "conv" / "model.txt.gz").exists() and (tmp_path / "conv" / "meta.json").exists()


def test_validate_json(model_dir):
    data = json.loads(_ok(invoke("validate", "--model", model_dir, "--data", GEMM, "--json")))
    assert data["problems"] == 12 and data["model"]["kind"] == "ranker"
    meta = json.loads((model_dir / "meta.json").read_text())
    assert meta["holdout"]["seed"] == 3 and len(meta["holdout"]["problems"]) == 12
    assert {"model", "model_top5", "rules", "vendor"} <= set(data["strategies"])


def test_validate_table_and_plot(model_dir, tmp_path):
    plot = tmp_path / "cdf.png"
    result = invoke("validate", "--model", model_dir, "--data", GEMM, "--plot", plot)
    out = _ok(result)
    for label in ("model top-1", "model top-5 (confirm)", "rules top-1", "vendor", "picks worst"):
        assert label in out
    assert plot.stat().st_size > 1000 and "wrote the efficiency CDF" in result.stderr


def test_errors_are_one_line(model_dir, tmp_path):
    result = invoke("validate", "--model", model_dir, "--data", CONV)
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and "op" in result.stderr
    result = invoke("train", "--data", GEMM, "--out", tmp_path / "m", "--kind", "svm")
    assert result.exit_code == 2 and "kind" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = invoke("validate", "--model", tmp_path / "nothing", "--data", GEMM)
    assert result.exit_code == 2 and "not a cost model" in result.stderr
