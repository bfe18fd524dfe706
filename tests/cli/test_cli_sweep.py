"""CPU lane: `tiledispatch sweep` end to end through typer's CliRunner (interpreter workers, a real dataset),
then `data summary` / `data oracle` / `data compact` on what it wrote."""
from __future__ import annotations

import json

from test_cli import assert_one_line_error, invoke

from tiledispatch.bench.dataset import Dataset, load_frame
from tiledispatch.problems.corpus import named_suite

KERNELS = ["gemm-tiled-rcr-fp16-fp16-fp32-32x32x32-w4-s3-g8-k1-e1-a1-none-bnone-d0-c0",
           "gemm-splitk-rcr-fp16-fp16-fp32-32x32x32-w4-s3-g8-k2-e1-a1-none-bnone-d0-c0"]


def test_sweep_writes_a_dataset_and_the_data_tools_read_it(tmp_path, cache):
    config = tmp_path / "kernels.json"
    config.write_text(json.dumps(KERNELS))
    out = tmp_path / "d"
    result = invoke("sweep", "--problems", "smoke_gemm", "--dtype", "fp16", "--limit", "2", "--config", str(config),
                    "--out", str(out), "--workers", "2", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["pairs"] == 4 and report["measured"] == 4 and report["by_status"] == {"ok": 4}
    assert report["pairs_per_second"] > 0 and report["workers"] == ["cpu0", "cpu1"]
    df = load_frame(out)
    wanted = {e.problem.signature() for e in named_suite("smoke_gemm", dtype="fp16")[:2]}
    assert set(df.problem) == wanted and set(df.kernel) == set(KERNELS)

    again = invoke("sweep", "--problems", "smoke_gemm", "--dtype", "fp16", "--limit", "2", "--config", str(config),
                   "--out", str(out), "--resume", "--json")
    assert json.loads(again.stdout)["resumed"] == 4
    summary = json.loads(invoke("data", "summary", str(out), "--json").stdout)
    assert summary["rows"] == 4 and summary["by_status"]["ok"] == 4
    oracle = json.loads(invoke("data", "oracle", str(out), "--json").stdout)
    assert len(oracle["problems"]) == 2
    assert invoke("data", "compact", str(out)).exit_code == 0 and len(Dataset(out).parts()) == 1
    assert len(load_frame(out)) == 4


def test_sweep_errors_name_the_field(tmp_path, cache):
    assert_one_line_error(invoke("sweep", "--problems", "no_such_suite", "--preset", "gemm_fp16_rcr_latency",
                                 "--out", str(tmp_path / "x")), 2, "suite")
    assert_one_line_error(invoke("sweep", "--problems", "smoke_gemm", "--layout", "rcr", "--dtype", "fp16",
                                 "--out", str(tmp_path / "y")), 2, "--preset")
    assert_one_line_error(invoke("sweep", "--problems", "smoke_gemm", "--preset", "gemm_fp16_rcr_latency",
                                 "--gpus", "0", "--out", str(tmp_path / "z")), 2, "gpus")
