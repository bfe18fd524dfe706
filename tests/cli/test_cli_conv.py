"""CPU lane: `select/run/profile conv`, `codegen --op conv` and `list --op conv` through typer's CliRunner.

Kernels are 1x1 instances of the conv family `gemm` (a GEMM over the pixels): they compile in about a second and
run tiny problems on the interpreter in milliseconds. The module cache (conftest.py) holds them.
"""
from __future__ import annotations

import csv
import dataclasses
import json

import pytest
from test_cli import HAS_GPU, assert_one_line_error, invoke

import tiledispatch as td
from tiledispatch import presets
from tiledispatch.cli.conv_args import ConvOptions, join_per_dim_values, padding_value
from tiledispatch.cli.measure import check, make_inputs
from tiledispatch.codegen.writer import file_name
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.bench.vendor import conv_vendor

FWD = "conv-gemm-fwd-2d-fp16-fp16-fp32-64x64x32-g1-w4-s3-k0-tap-a8-none-b0"
FWD_A1 = "conv-gemm-fwd-2d-fp16-fp16-fp32-64x64x32-g1-w4-s3-k0-tap-a1-none-b0"
BWD_DATA_3D = "conv-gemm-bwd_data-3d-fp16-fp16-fp32-64x64x32-g1-w4-s3-k0-tap-a1-none-b0"
# 2 x 3 x 5 pixels: a partial row tile; C=8, K=16 are multiples of 8, so the problem is align 8 (FWD runs it)
ONE_BY_ONE = ["--n", "2", "--c", "8", "--k", "16", "--spatial", "3", "5", "--filter", "1", "1"]


@pytest.fixture(scope="module")
def kernels_file(cache_dir, tmp_path_factory):
    """A --config file: two fwd instances (align 8 and 1) by name, a bwd_data one as a config dict."""
    path = tmp_path_factory.mktemp("cli-conv-config") / "conv.json"
    path.write_text(json.dumps([FWD, FWD_A1, parse_name(BWD_DATA_3D).to_dict()]))
    result = invoke("build", "--config", str(path), "-j", "2", "--json")
    assert result.exit_code == 0, result.stderr
    assert not json.loads(result.stdout)["failed"]
    return path


# -- parsing --------------------------------------------------------------------------------------------------
def test_per_dim_values_are_joined_and_positionals_kept():
    argv = ["run", "conv", "--spatial", "56", "56", "fwd", "--padding", "1:0", "-2", "--n", "3"]
    assert join_per_dim_values(argv) == ["run", "conv", "--spatial", "56,56", "fwd", "--padding", "1:0,-2",
                                         "--n", "3"]


def test_padding_syntax():
    assert padding_value("1", 2) == 1
    assert padding_value("1,2", 2) == (1, 2)
    assert padding_value("1:0,2:1", 2) == ((1, 0), (2, 1))
    assert padding_value("1:0", 3) == ((1, 0),) * 3


def test_options_build_the_problem_and_default_to_the_kernel():
    options = ConvOptions("fwd", 2, 8, 16, 2, "9,7", "3,3", "2", "1:0,2:1", "1", None, None, None)
    problem = options.problem(parse_name(FWD_A1))
    assert problem.dtype == "fp16" and problem.groups == 2 and problem.stride == (2, 2)
    assert problem.padding == ((1, 0), (2, 1)) and problem.spatial == (9, 7)
    fused = ConvConfig(family="gemm", direction="fwd", dtype="bf16", activation="relu", bias=True)
    assert (options.problem(fused).activation, options.problem(fused).bias) == ("relu", True)
    assert options.problem().dtype == "bf16"


# -- errors: one line, exit 2, naming the field --------------------------------------------------------------
@pytest.mark.parametrize(("extra", "fragments"), [
    (["--groups", "3"], ["groups=3", "c=8"]),                            # groups must divide C and K
    (["--spatial", "4", "4", "4", "4"], ["spatial", "1 to 3"]),
    (["--spatial", "4,x"], ["spatial", "'x' is not an integer"]),
    (["--filter", "3"], ["filter", "2 sizes"]),                          # filter dims != spatial dims
    (["--padding", "-1"], ["padding", "negative"]),
    (["--padding", "1:2:3"], ["padding", "LEFT:RIGHT"]),
    (["--stride", "1", "1", "1"], ["stride", "2 ints"]),
    (["--n", "0"], ["n=0", "positive"]),
    (["--n", "-5"], ["n=-5"]),
    (["--filter", "5", "5"], ["output size", "not positive"]),
    (["--dtype", "fp8"], ["--dtype", "fp8"]),
])
def test_bad_problem_is_one_line_exit_2(cache, extra, fragments):
    # options given twice: the later value wins in click, so `extra` overrides ONE_BY_ONE
    assert_one_line_error(invoke("select", "conv", "fwd", *ONE_BY_ONE, *extra), 2, *fragments)


@pytest.mark.parametrize(("args", "fragments"), [
    (["select", "conv", "sideways", *ONE_BY_ONE], ["sideways", "fwd"]),
    (["run", "conv", "bwd_data", *ONE_BY_ONE, "--bias"], ["bias", "'fwd' only"]),
    (["run", "conv", "fwd", *ONE_BY_ONE, "--kernel",
      "gemm-tiled-rcr-fp16-fp16-fp32-32x32x32-w4-s2-g8-k1-e1-a1-none-bnone-d0-c0"], ["gemm instance"]),
    (["run", "gemm", "8", "8", "8", "--kernel", FWD], ["conv instance"]),
    (["run", "conv", "fwd", *ONE_BY_ONE, "--padding", "1", "--kernel", FWD, "--json"], ["padding"]),  # 1x1: none
    (["list", "--op", "conv", "--supports", "8", "8", "8"], ["--supports", "select conv"]),
    (["codegen", "--op", "conv", "--datatype", "int8", "--output-dir", "unused"], ["datatype", "int8"]),
    (["codegen", "--op", "gemm", "--ndim", "2", "--datatype", "fp16", "--output-dir", "unused"], ["--ndim"]),
])
def test_bad_command_is_one_line_exit_2(cache, args, fragments):
    assert_one_line_error(invoke(*args), 2, *fragments)


# -- select / run / profile on the interpreter (or the GPU when present) -------------------------------------
def test_select_conv_json_with_kernel(cache):
    result = invoke("select", "conv", "fwd", *ONE_BY_ONE, "--kernel", FWD, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["kernel"] == FWD and data["strategy"] == "explicit (--kernel)"
    assert data["problem"]["spatial"] == [3, 5] and data["problem"]["dtype"] == "fp16"   # the kernel's dtype


def test_select_conv_from_config_file(cache, kernels_file):
    # C=6: not a multiple of 8, so only the align-1 instance supports it
    result = invoke("select", "conv", "fwd", "--n", "1", "--c", "6", "--k", "10", "--spatial", "4", "--spatial",
                    "3,5", "--filter", "1", "1", "--dtype", "fp16", "--config", str(kernels_file), "--strategy",
                    "first_fit", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["kernel"] == FWD_A1


def test_run_conv_validate_json(cache, kernels_file):
    result = invoke("run", "conv", "fwd", *ONE_BY_ONE, "--kernel", FWD, "--validate", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"problem", "kernel", "execution", "validation", "status"} <= set(data)
    assert data["status"] == "ok" and data["validation"]["passed"] is True and data["validation"]["rel_err"] < 2e-3
    assert data["execution"]["time_ms"] > 0 and data["execution"]["tflops"] > 0 and data["execution"]["gbps"] > 0
    assert data["backend"] == ("cuda" if HAS_GPU else "interpreter")


def test_run_conv_backward_data_3d_text(cache, kernels_file):
    # odd channel counts (align 1) and a 3-D problem, with the 3-D bwd_data instance of the config file
    result = invoke("run", "conv", "bwd_data", "--n", "1", "--c", "6", "--k", "10", "--spatial", "2", "3", "4",
                    "--filter", "1", "1", "1", "--dtype", "fp16", "--config", str(kernels_file), "--strategy",
                    "first_fit", "--validate")
    assert result.exit_code == 0, result.stderr
    assert BWD_DATA_3D in result.stdout and "PASSED" in result.stdout
    if not HAS_GPU:
        assert "interpreter" in result.stdout


def test_profile_conv_json_and_csv(cache, kernels_file, tmp_path):
    table = tmp_path / "conv.csv"
    result = invoke("profile", "conv", "fwd", *ONE_BY_ONE, "--dtype", "fp16", "--config", str(kernels_file),
                    "--validate", "--vendor", "--csv", str(table), "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    timed = [r for r in rows if r["status"] == "ok"]
    assert {FWD, FWD_A1} <= {r["kernel"] for r in timed}
    assert all(r["rel_err"] < 2e-3 for r in timed)
    assert [r["time_ms"] for r in timed] == sorted(r["time_ms"] for r in timed)
    assert any(r["kernel"] == BWD_DATA_3D and r["status"] == "unsupported" for r in rows)
    if not HAS_GPU:
        assert "vendor timing needs a GPU" in result.stderr
    with table.open() as handle:
        assert len(list(csv.DictReader(handle))) == len(rows)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_vendor_functions_compute_the_direction(direction):
    """The cuDNN rows' torch calls, run on CPU tensors here (fp32, stride 2, grouped; fwd with its epilogue)."""
    fwd = direction == "fwd"
    problem = td.ConvProblem(direction, 2, 8, 12, 4, (5, 6), (3, 3), stride=2, padding=1, dtype="fp32",
                             bias=fwd, activation="gelu" if fwd else "none")
    args = make_inputs(problem, "cpu")
    label, run = conv_vendor(problem, args)
    assert label.startswith("cuDNN") and check(run(), args, problem)["passed"]
    asymmetric = dataclasses.replace(problem, padding=((1, 0), (1, 1)))
    with pytest.raises(td.UnsupportedProblem, match="symmetric padding"):
        conv_vendor(asymmetric, args)


# -- codegen / build / list -----------------------------------------------------------------------------------
@pytest.fixture
def fake_conv_preset(monkeypatch):
    """conv presets may not exist yet: serve a two-instance one under every conv_* name."""
    real = presets.load_preset
    configs = [parse_name(FWD), parse_name(FWD_A1)]
    monkeypatch.setattr(presets, "load_preset",
                        lambda name: list(configs) if name.startswith("conv_") else real(name))
    return configs


def test_codegen_conv_writes_round_tripping_files_then_builds(cache, fake_conv_preset, tmp_path):
    out = tmp_path / "generated"
    result = invoke("codegen", "--op", "conv", "--direction", "fwd", "--ndim", "2", "--datatype", "fp16",
                    "--gpu-target", "sm_90", "--output-dir", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["op"] == "conv" and manifest["arch"] == "sm_90"
    assert [row["name"] for row in manifest["instances"]] == [c.name for c in fake_conv_preset]
    for row in manifest["instances"]:
        cfg = parse_name(row["name"])
        assert cfg.name == row["name"] and ConvConfig.from_dict(row["config"]) == cfg
        assert row["file"] == file_name(cfg) and (out / row["file"]).is_file()
    built = invoke("build", "--config", str(out), "--json")
    assert built.exit_code == 0, built.stderr
    assert not json.loads(built.stdout)["failed"]


def test_codegen_conv_rejects_a_preset_of_other_fields(cache, fake_conv_preset):
    result = invoke("codegen", "--op", "conv", "--direction", "bwd_data", "--datatype", "fp16", "--output-dir",
                    "unused")
    assert_one_line_error(result, 2, "direction fwd, not bwd_data")


def test_list_op_filter(cache):
    result = invoke("list", "--op", "conv", "--json")
    assert result.exit_code == 0, result.stderr
    assert all(row["op"] == "conv" for row in json.loads(result.stdout))


@pytest.mark.skipif("conv_bwd_weight_bf16_3d_essential" not in presets.list_presets(), reason="no conv presets yet")
def test_codegen_real_conv_preset(cache, tmp_path):
    result = invoke("codegen", "--op", "conv", "--direction", "bwd_weight", "--ndim", "3", "--datatype", "bf16",
                    "--output-dir", str(tmp_path), "--json")
    assert result.exit_code == 0, result.stderr
    names = json.loads(result.stdout)["instances"]
    assert names and all(parse_name(n).direction == "bwd_weight" and parse_name(n).ndim == 3 for n in names)
    listed = invoke("list", "--preset", "conv_bwd_weight_bf16_3d_essential", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert {row["name"] for row in json.loads(listed.stdout)["instances"]} >= set(names)


def test_conv_help_shows_the_problem_options(cache):
    result = invoke("run", "conv", "--help")
    assert result.exit_code == 0
    assert "--spatial" in result.stdout and "LEFT:RIGHT" in result.stdout
