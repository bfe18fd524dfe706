"""CPU lane: `tiledispatch export` and `verify-bundle` (two small kernels from the session's build cache; the
essential presets are exported by the slow test of tests/bundle)."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from tiledispatch.cli.main import app
from tiledispatch.testing import small_config

NAMES = [small_config().name, small_config(layout="rrr").name]   # both in the session's shared set


def invoke(*args):
    try:
        runner = CliRunner(mix_stderr=False)   # click < 8.2 mixes stderr into stdout by default
    except TypeError:
        runner = CliRunner()
    return runner.invoke(app, [str(a) for a in args])


def test_export_then_verify_bundle(tmp_path):
    kernels = tmp_path / "kernels.json"
    kernels.write_text(json.dumps(NAMES))
    out = tmp_path / "bundle"
    result = invoke("export", "--config", kernels, "--gpu-target", "sm_90", "--out", out, "-j", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["arch"] == "sm_90" and report["kernels"] == 2 and report["path"] == str(out)
    assert not report["build"]["failed"] and report["bytes"] > 0
    result = invoke("verify-bundle", out)
    assert result.exit_code == 0 and result.stdout.startswith("ok: ") and "2 sm_90 kernels" in result.stdout
    again = invoke("export", "--config", kernels, "--gpu-target", "sm_90", "--out", out)
    assert again.exit_code == 1 and "--force" in again.stderr and again.stderr.count("\n") == 1
    next(out.rglob("*.cubin")).write_bytes(b"not a cubin")
    result = invoke("verify-bundle", out)
    assert result.exit_code == 1 and result.stderr.startswith("error: bundle ")
    assert "does not match its sha256" in result.stderr and result.stderr.count("\n") == 1


def test_export_needs_a_known_preset_and_verify_checks_the_arch(tmp_path, monkeypatch):
    result = invoke("export", "--preset", "gemm_bf16_rcr_esential", "--out", tmp_path / "b")
    assert result.exit_code == 2 and "gemm_bf16_rcr_essential" in result.stderr
    result = invoke("export", "--out", tmp_path / "b")
    assert result.exit_code == 2 and "--preset" in result.stderr
    kernels = tmp_path / "kernels.json"
    kernels.write_text(json.dumps(NAMES[:1]))
    result = invoke("export", "--config", kernels, "--gpu-target", "sm_90", "--out", tmp_path / "b")
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("TILEDISPATCH_ARCH", "sm_80")
    result = invoke("verify-bundle", tmp_path / "b")
    assert result.exit_code == 1 and "holds kernels for sm_90, this device is sm_80" in result.stderr
    assert invoke("verify-bundle", tmp_path / "b", "--any-arch").exit_code == 0
    assert not (tmp_path / "b" / "presets").exists()


def test_run_takes_its_kernel_from_the_bundle_in_an_empty_cache(tmp_path, monkeypatch):
    from tiledispatch.build.pool import compilations

    kernels = tmp_path / "kernels.json"
    kernels.write_text(json.dumps(NAMES[:1]))
    result = invoke("export", "--config", kernels, "--gpu-target", "sm_90", "--out", tmp_path / "b")
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("TILEDISPATCH_BUNDLE", str(tmp_path / "b"))
    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(tmp_path / "empty"))
    before = compilations()
    result = invoke("run", "gemm", 37, 45, 100, "--dtype", "fp16", "--kernel", NAMES[0], "--validate",
                    "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["validation"]["passed"] and compilations() == before
    assert not (tmp_path / "empty" / "sm_90").exists()
