"""benchmarks/tables.py: table blocks of BENCHMARKS.md render from their sources and nothing else changes, the
committed BENCHMARKS.md is up to date with its JSON, the model benchmark's results render, and a
dispatch-overhead run that lacks variants still renders."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tables():
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module("tables")


def _models_result(path: Path, mode: str = "gpu") -> None:
    runs = {"train": {"stock_eager": {"wall_ms": 10.0, "gpu_ms": 5.0,
                                      "by_class_ms": {"vendor_conv_gemm": 2.0, "norm": 3.0},
                                      "conv_gemm_ms": 2.0},
                      "converted_eager": {"wall_ms": 8.0, "gpu_ms": 4.0}}}
    loss = {"model": "resnet18", "error": "RuntimeError: out of memory"}
    path.write_text(json.dumps({"benchmark": "models", "mode": mode, "gpu": "NVIDIA H200", "settings": {},
                                "models": [{"model": "resnet50", "group": "2d-dense", "runs": runs,
                                            "layers": {"taken": 54, "left": 0}}],
                                "notes": ["first run"], "loss": loss}))


def test_models_results_render(tables, tmp_path):
    _models_result(tmp_path / "models_h200.json")
    text = tables.section(tmp_path, "models_h200.json")
    assert text.count("## Models: stock vs converted") == 1 and "(models_h200.json)" in text
    assert "Note: first run" in text and "| resnet50 | " in text and "54 / 0" in text
    assert "| resnet50 | stock_eager | 5.0 | 40% |" in text   # conv/GEMM share of the GPU time
    assert "Failed: RuntimeError: out of memory" in text


def test_blocks_render_again_and_the_prose_stays(tables, tmp_path):
    _models_result(tmp_path / "models_h200.json")
    page = ("# Benchmarks\n\nWritten by hand.\n\n<!-- table: models_h200.json -->\nstale\n<!-- /table -->\n\n"
            "More prose, | not a table |.\n")
    assert tables.stale_blocks(page, tmp_path) == ["models_h200.json"]
    text = tables.render(page, tmp_path)
    assert text.startswith("# Benchmarks\n\nWritten by hand.\n\n<!-- table: models_h200.json -->\n## Models")
    assert text.endswith("<!-- /table -->\n\nMore prose, | not a table |.\n") and "stale" not in text
    assert tables.stale_blocks(text, tmp_path) == [] and tables.render(text, tmp_path) == text


def test_a_block_without_a_renderable_source_names_it(tables, tmp_path):
    _models_result(tmp_path / "models_cpu_smoke.json", mode="smoke")
    for source in ("missing.json", "models_cpu_smoke.json"):
        with pytest.raises(tables.TablesError, match=source):
            tables.render(f"<!-- table: {source} -->\n<!-- /table -->\n", tmp_path)


def test_committed_benchmarks_md_is_up_to_date_with_its_json(tables):
    """Changing a result file that BENCHMARKS.md renders needs `python benchmarks/tables.py` in the same
    change."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert len(tables.BLOCK.findall(text)) >= 10
    assert tables.stale_blocks(text, ROOT / "benchmarks" / "results") == []


def test_dispatch_overhead_renders_a_run_without_some_variants(tables, tmp_path):
    """A row measured without `direct` has no overheads and no verdict: its cells show '–'."""
    row = {"m": 64, "n": 64, "k": 64, "kernel": "gemm-x", "per_call_us": {"td_gemm": 9.0},
           "overhead_us": {}, "pass": None}
    path = tmp_path / "dispatch_overhead_h200.json"
    path.write_text(json.dumps({"benchmark": "dispatch_overhead", "mode": "gpu", "gpu": "NVIDIA H200",
                                "host_cpu": "x", "tiledispatch": "0.1", "triton": "3.6", "torch": "2.11",
                                "cuda": "12.8", "date": "today", "protocol": "p", "rows": [row]}))
    text = tables.dispatch_overhead_section(path)
    assert "| 64×64×64 | – | – | – | 9.00 |" in text and "| – / – / – | – | `gemm-x` |" in text
    assert "Limit: – µs" in text
