"""CPU lane: what the command line prints: help text kept literal, `info` listing the shipped cost models,
`list` within a screen per op, one-line errors for unknown presets and out-of-range sizes, `build`'s summary
once, and Triton's cache in `cache info`. Nothing here compiles a kernel but the one `build` test."""
from __future__ import annotations

import json
import re

import pytest
from test_cli import PLAIN, assert_one_line_error, invoke

from tiledispatch.select.cost_model import models_root

BOX = re.compile(r"[│╭╮╰╯─┃━┏┓┗┛┡┩┣┫╇╈┳┻]")


def _flat(output: str) -> str:
    """Help text without rich's boxes and line wrapping, so phrases can be searched whole."""
    return " ".join(BOX.sub(" ", output).split())


def _ok(result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


@pytest.mark.parametrize(("args", "phrases"), [
    (["select", "gemm"], ["input dtype [default: bf16, or the --kernel's]",
                          "row adds bias[m], col adds bias[n] [default: none, or the --kernel's]"]),
    (["list"], ["fused activation [default: none, or the --kernel's]"]),
    (["codegen"], ["gemm: major order of A, B, out [default: rcr]", "[default: all]"]),
    (["select", "conv"], ["[default: conv_<direction>_<dtype>_<ndim>d_essential]"]),
])
def test_help_keeps_bracketed_text(args, phrases, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")   # one line per option: wrapped cells would interleave columns
    text = _flat(_ok(invoke(*args, "--help")))
    for phrase in phrases:
        assert phrase in text, (phrase, text)


def test_info_lists_shipped_models(cache):
    shipped = sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in models_root().glob("*/*/meta.json"))
    assert shipped, "the package ships cost models"
    data = json.loads(_ok(invoke("info", "--json")))
    assert sorted(f"{m['arch']}/{m['key']}" for m in data["models"]) == shipped
    assert all(m["usable"] and "problems" in m["summary"] for m in data["models"])
    assert {"root", "entries", "bytes"} <= set(data["cache"]["triton"])
    text = _ok(invoke("info"))
    assert "none shipped" not in text and f"{len(shipped)} shipped" in text
    for key in shipped:
        line = next(line for line in text.splitlines() if key in line)
        assert "ranker" in line or "regressor" in line, line
    for row in ("tiledispatch", "triton", "torch", "gpu", "arch", "cache dir", "presets"):
        assert any(line.startswith(row) for line in text.splitlines()), row


def test_list_presets_is_a_screen_per_op(cache):
    text = _ok(invoke("list"))
    for op in ("gemm", "conv"):
        assert f" {op} presets for sm_90" in text
    assert len(text.splitlines()) <= 2 * 40
    assert text.count("every candidate instance") == 0
    verbose = _ok(invoke("list", "--verbose"))
    assert "gemm_fp16_rcr_all" in verbose and verbose.count("every candidate instance") == 1


def test_list_instances_summary_and_verbose(cache):
    text = _ok(invoke("list", "--preset", "gemm_fp16_rcr_all"))
    assert len(text.splitlines()) <= 40 and "splitk" in text and "tiles #" in text
    verbose = _ok(invoke("list", "--preset", "gemm_fp16_rcr_all", "--verbose"))
    assert verbose.count("gemm-splitk-rcr-fp16") > 1000


@pytest.mark.parametrize(("args", "fragments"), [
    (["list", "--preset", "gemm_fp16_rcr_esential"], ["preset='gemm_fp16_rcr_esential'",
                                                      "closest: gemm_fp16_rcr_essential", "tiledispatch list"]),
    (["build", "--preselected", "conv_fwd_bf16_2d_al"], ["preselected=", "conv_fwd_bf16_2d_all"]),
    (["select", "gemm", "8", "8", "8", "--preset", "nope"], ["preset='nope'", "no close match"]),
    (["select", "gemm", "8", "8", "8", "--dtype", "fp8e4m3", "--layout", "rrr"],
     ["gemm_fp8e4m3_rrr_essential", "closest: gemm_fp8e4m3_rcr_essential"]),
])
def test_unknown_preset_names_closest(cache, args, fragments):
    result = invoke(*args)
    assert_one_line_error(result, 2, *fragments)
    assert len(result.stderr) < 300 and "conv_bwd_weight_fp32_3d_all" not in result.stderr


@pytest.mark.parametrize("size", ["1e12", "64.0", "0x40"])
def test_sizes_are_integers(cache, size):
    assert_one_line_error(invoke("select", "gemm", size, "64", "64"), 2, "'M'")


@pytest.mark.parametrize("args", [["select", "gemm", str(10**12), "64", "64", "--kernel", PLAIN],
                                  ["select", "conv", "fwd", "--n", str(10**12), "--c", "8", "--k", "8",
                                   "--spatial", "8", "8", "--filter", "3", "3"]])
def test_size_beyond_addressable_is_refused(cache, args):
    """Refused before any build, naming the field."""
    assert_one_line_error(invoke(*args), 2, "=1000000000000", "largest size")


def test_build_summary_once(cache, tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps([PLAIN]))
    result = invoke("build", "--config", path)
    assert result.exit_code == 0, result.stderr
    assert (result.stdout + result.stderr).count("kernels for sm_90") == 1, (result.stdout, result.stderr)


def test_cache_info_counts_tritons_cache(cache):
    triton = cache / ".triton"
    (triton / "abc").mkdir(parents=True, exist_ok=True)
    (triton / "abc" / "k.cubin").write_bytes(b"x" * 1000)
    data = json.loads(_ok(invoke("cache", "info", "--json")))
    assert data["triton"]["entries"] >= 1 and data["triton"]["bytes"] >= 1000
    assert "Triton's cache" in _ok(invoke("cache", "info"))


def test_cache_dir_that_is_a_file(tmp_path, monkeypatch):
    path = tmp_path / "file"
    path.write_text("")
    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(path))
    assert_one_line_error(invoke("cache", "info"), 1, str(path), "not a directory")
