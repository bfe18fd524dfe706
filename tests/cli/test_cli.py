"""CPU lane: the `tiledispatch` command line (in-process through typer's CliRunner, plus one real process).

Builds are kept small: a module-wide cache holds three 32x32x32 instances (listed in a --config file) and the
demo's five; the codegen -> build test compiles the seven split-K instances of one preset into its own cache.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tiledispatch.cli.main import app
from tiledispatch.presets import load_preset

PLAIN = "gemm-tiled-rcr-fp16-fp16-fp32-32x32x32-w4-s2-g8-k1-e1-a1-none-bnone-d0-c0"
SPLITK = "gemm-splitk-rcr-fp16-fp16-fp32-32x32x32-w4-s2-g8-k2-e1-a1-none-bnone-d0-c0"
FUSED = "gemm-tiled-rcr-fp16-fp16-fp32-32x32x32-w4-s2-g8-k1-e1-a1-gelu-bcol-d0-c0"
ODD = ["37", "45", "100"]          # unaligned sizes, partial tiles in every dimension
HAS_GPU = torch.cuda.is_available()


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into stdout by default
    except TypeError:
        return CliRunner()


def invoke(*args):
    """Run the command line in-process; arguments may be paths (passed as strings)."""
    return _runner().invoke(app, [str(a) for a in args])


def assert_one_line_error(result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def kernels_file(cache_dir, tmp_path_factory) -> Path:
    """A --config file listing three small instances, built once into the module cache."""
    path = tmp_path_factory.mktemp("cli-config") / "kernels.json"
    path.write_text(json.dumps([PLAIN, SPLITK, FUSED]))
    result = invoke("build", "--config", str(path), "-j", "2", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert not report["failed"] and len(report["built"]) + len(report["cached"]) == 3
    return path


def test_info_json(cache):
    result = invoke("info", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"tiledispatch", "triton", "torch", "gpu", "arch", "cache", "presets"} <= set(data)
    assert data["cache"]["root"] == str(cache)
    assert "gemm_fp16_rcr_essential" in data["presets"]
    if not HAS_GPU:
        assert data["gpu"]["name"] == "none (Triton interpreter for CPU tensors)"
        assert data["arch"]["name"] == "sm_90"


def test_codegen_then_build_manifest_then_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "generated"
    result = invoke("codegen", "--op", "gemm", "--datatype", "fp16", "--layout", "rcr",
                    "--gpu-target", "sm_90", "--variants", "splitk", "--output-dir", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    written = json.loads(result.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    names = [row["name"] for row in manifest["instances"]]
    assert names == written["instances"] and names and all("-splitk-" in name for name in names)
    assert manifest["arch"] == "sm_90"
    assert all((out / row["file"]).is_file() for row in manifest["instances"])

    first = invoke("build", "--config", str(out / "manifest.json"), "-j", "2", "--json")
    assert first.exit_code == 0, first.stderr
    report = json.loads(first.stdout)
    assert sorted(report["built"]) == sorted(names) and not report["failed"]

    second = invoke("build", "--config", str(out / "manifest.json"), "--json")
    assert second.exit_code == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["built"] == [] and sorted(again["cached"]) == sorted(names)


def test_build_text_report(cache, kernels_file):
    result = invoke("build", "--config", str(kernels_file))
    assert result.exit_code == 0, result.stderr
    assert "0 built, 3 from cache, 0 failed" in result.stdout


def test_select_json(cache, kernels_file):
    result = invoke("select", "gemm", *ODD, "--dtype", "fp16", "--config", str(kernels_file), "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["kernel"] in (PLAIN, SPLITK)          # FUSED has another epilogue
    assert data["strategy"] == "ml"                   # auto: the shipped sm_90 fp16 GEMM cost model ranks
    assert any("cost model" in note for note in data["notes"])
    assert (data["problem"]["m"], data["problem"]["n"], data["problem"]["k"]) == (37, 45, 100)
    assert data["ranking"] and {r["kernel"].split(" ")[0] for r in data["ranking"]} <= {PLAIN, SPLITK}


def test_select_json_says_when_the_pick_was_compiled_on_demand(monkeypatch, tmp_path):
    from tiledispatch.testing import builds

    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "1")
    stub = builds.install(monkeypatch, builds.StubBuilds(tmp_path / "entries"))   # nothing compiles
    result = invoke("select", "gemm", *ODD, "--dtype", "fp16", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    essential = {cfg.name for cfg in load_preset("gemm_fp16_rcr_essential")}
    assert set(stub.batches[0]) == essential and len(stub.batches) == 2 and len(stub.batches[1]) == 2
    assert data["space"]["ranked"] == len(load_preset("gemm_fp16_rcr_candidates"))
    assert data["space"]["pick"] == "on_demand" and data["kernel"] not in essential   # the model's pick
    assert data["kernel"] in data["space"]["compiled"] and data["space"]["compile_s"] >= 0
    assert any("compiled on demand in" in note for note in data["notes"])


def test_select_text_names_kernel_and_strategy(cache, kernels_file):
    result = invoke("select", "gemm", *ODD, "--dtype", "fp16", "--activation", "gelu", "--bias", "col",
                    "--config", str(kernels_file))
    assert result.exit_code == 0, result.stderr
    assert FUSED in result.stdout and "strategy: ml" in result.stdout
    rules = invoke("select", "gemm", *ODD, "--dtype", "fp16", "--config", str(kernels_file), "--strategy", "rules")
    assert rules.exit_code == 0 and "strategy: rules" in rules.stdout


def test_run_validate_json_on_interpreter(cache, kernels_file):
    result = invoke("run", "gemm", *ODD, "--dtype", "fp16", "--config", str(kernels_file), "--validate",
                    "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"problem", "kernel", "execution", "validation", "status", "device", "backend"} <= set(data)
    assert data["status"] == "ok" and data["validation"]["passed"] is True
    assert data["validation"]["rel_err"] <= 2e-3
    assert data["execution"]["time_ms"] > 0 and data["execution"]["tflops"] > 0
    assert data["backend"] == ("cuda" if HAS_GPU else "interpreter")


def test_run_kernel_takes_its_epilogue(cache, kernels_file):
    result = invoke("run", "gemm", "20", "33", "40", "--kernel", FUSED, "--validate")
    assert result.exit_code == 0, result.stderr
    assert FUSED in result.stdout and "PASSED" in result.stdout
    if not HAS_GPU:
        assert "interpreter" in result.stdout


def test_profile_json_and_csv(cache, kernels_file, tmp_path):
    table = tmp_path / "profile.csv"
    result = invoke("profile", "gemm", "20", "33", "40", "--dtype", "fp16", "--config", str(kernels_file),
                    "--vendor", "--validate", "--csv", str(table), "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    timed = [r for r in rows if r["status"] == "ok"]
    assert {r["kernel"] for r in timed} >= {PLAIN, SPLITK}
    assert [r["time_ms"] for r in timed] == sorted(r["time_ms"] for r in timed)
    assert all(r["rel_err"] <= 2e-3 for r in timed)
    assert any(r["kernel"] == FUSED and r["status"] == "unsupported" for r in rows)
    with table.open() as handle:
        assert len(list(csv.DictReader(handle))) == len(rows)


def test_list_presets_and_supporting_instances(cache):
    presets = invoke("list", "--json")
    assert presets.exit_code == 0, presets.stderr
    listed = {p["name"]: p["instances"] for p in json.loads(presets.stdout)}
    assert listed["gemm_fp16_crr_essential"] == len(load_preset("gemm_fp16_crr_essential")) == 27
    result = invoke("list", "--preset", "gemm_fp16_crr_essential", "--layout", "crr", "--supports", "100", "72",
                    "96", "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["instances"]
    assert rows and all(row["align"] == 1 for row in rows)   # crr: M=100 runs along A's unit stride


def test_cache_info(cache, kernels_file):
    result = invoke("cache", "info", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["root"] == str(cache) and data["entries"] >= 3 and data["per_arch"].get("sm_90", 0) >= 3
    text = invoke("cache", "info")
    assert text.exit_code == 0 and f"cache dir: {cache}" in text.stdout


def test_demo(cache):
    result = invoke("demo")
    assert result.exit_code == 0, result.stderr
    assert "PASSED" in result.stdout and "selected" in result.stdout
    assert ("GPU" if HAS_GPU else "Triton interpreter") in result.stdout


@pytest.mark.parametrize(("args", "fragments"), [
    (["build", "--preselected", "no_such_preset"], ["preset", "no_such_preset"]),
    (["run", "gemm", "8", "8", "8", "--kernel", "gemm-tiled-rcr-fp16"], ["malformed"]),
    (["select", "gemm", "8", "8", "8", "--dtype", "fp8"], ["--dtype", "fp8"]),
    (["codegen", "--op", "conv", "--layout", "rcr", "--datatype", "fp16", "--output-dir", "unused"],
     ["--layout", "--op gemm"]),
    (["select", "conv", "fwd", "--n", "3"], ["Missing option"]),
    (["select", "gemm", "-5", "8", "8"], ["m=-5", "positive"]),
    (["run", "gemm", "8", "0", "8", "--validate"], ["n=0"]),
    (["select", "gemm", "8", "8"], ["Missing argument"]),
])
def test_bad_input_is_one_line_and_exit_2(cache, args, fragments):
    assert_one_line_error(invoke(*args), 2, *fragments)


def test_debug_shows_traceback(cache):
    result = invoke("--debug", "select", "gemm", "-5", "8", "8")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and result.stderr.rstrip().splitlines()[-1].startswith("error: ")


def test_real_process(cache):
    """`python -m tiledispatch`: JSON on stdout; an error is one stderr line and exit code 2."""
    env = {**os.environ, "TILEDISPATCH_CACHE_DIR": str(cache)}
    ok = subprocess.run([sys.executable, "-m", "tiledispatch", "info", "--json"], capture_output=True,
                        text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["cache"]["root"] == str(cache)
    bad = subprocess.run([sys.executable, "-m", "tiledispatch", "list", "--preset", "nope"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: preset='nope'")
