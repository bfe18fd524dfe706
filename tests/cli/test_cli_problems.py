"""CPU lane: `tiledispatch problems list|generate|show` through typer's CliRunner."""
from __future__ import annotations

import json

from test_cli import assert_one_line_error, invoke

from tiledispatch.problems import corpus


def test_list_json_names_every_suite_with_its_size() -> None:
    result = invoke("problems", "list", "--json")
    assert result.exit_code == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert list(rows) == list(corpus.SUITE_NAMES)
    assert rows["gemm"]["problems"] >= 1000 and rows["gemm"]["op"] == "gemm"
    assert all(rows[f"conv_{d}"]["problems"] >= 1000 for d in ("fwd", "bwd_data", "bwd_weight"))
    assert rows["smoke_gemm"]["problems"] == len(corpus.named_suite("smoke_gemm"))
    assert "ndims" in rows["conv_fwd"]["options"] and "layout" in rows["gemm"]["options"]


def test_list_table() -> None:
    result = invoke("problems", "list")
    assert result.exit_code == 0, result.stderr
    assert "conv_bwd_weight" in result.stdout and "smoke_conv_fwd" in result.stdout


def test_generate_then_show(tmp_path) -> None:
    out = tmp_path / "conv.json"
    result = invoke("problems", "generate", "conv_bwd_weight", "--out", str(out), "--ndims", "2,3",
                    "--count", "80", "--seed", "4", "--dtype", "fp16")
    assert result.exit_code == 0, result.stderr
    assert "wrote 80 conv problems" in result.stdout and "random" in result.stdout
    entries, meta = corpus.load_problems(out)
    assert entries == corpus.conv_corpus("bwd_weight", dtype="fp16", count=80, seed=4)
    assert meta["suite"] == "conv_bwd_weight" and meta["options"]["seed"] == 4

    shown = invoke("problems", "show", str(out), "--json")
    assert shown.exit_code == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["op"] == "conv" and data["problems"] == 80
    assert sum(data["by_source"].values()) == 80 and sum(data["by_kind"].values()) == 80
    assert all(kind.startswith("bwd_weight ") for kind in data["by_kind"])
    text = invoke("problems", "show", str(out))
    assert text.exit_code == 0 and "80 conv problems" in text.stdout and "problems per kind" in text.stdout


def test_generate_smoke_gemm_json(tmp_path) -> None:
    out = tmp_path / "g.json"
    result = invoke("problems", "generate", "smoke_gemm", "--out", str(out), "--layout", "rrr", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["op"] == "gemm" and data["problems"] == 6 and sum(data["by_source"].values()) == 6
    entries, _ = corpus.load_problems(out)
    assert {e.problem.layout for e in entries} == {"rrr"}


def test_errors_are_one_line(tmp_path) -> None:
    out = str(tmp_path / "x.json")
    assert_one_line_error(invoke("problems", "generate", "nope", "--out", out), 2, "suite", "smoke_gemm")
    assert_one_line_error(invoke("problems", "generate", "conv_fwd", "--out", out, "--layout", "rcr"), 2, "layout")
    assert_one_line_error(invoke("problems", "generate", "conv_fwd", "--out", out, "--ndims", "2,x"), 2, "ndims")
    assert_one_line_error(invoke("problems", "generate", "conv_fwd", "--out", out, "--ndims", "4"), 2, "ndims")
    assert_one_line_error(invoke("problems", "generate", "gemm", "--out", out, "--dtype", "fp64"), 2, "dtype")
    assert not (tmp_path / "x.json").exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": 1, "kind": "something", "op": "gemm", "problems": []}))
    assert_one_line_error(invoke("problems", "show", str(bad)), 2, "kind")
