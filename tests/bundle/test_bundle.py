"""CPU lane: deployment bundles. Export two small sm_90 kernels (from the session's build cache), verify the
manifest, load into an empty cache and build with nothing compiled; tampered, incomplete and mismatched
bundles are refused with BundleError naming the field; an interrupted export leaves no bundle."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

import tiledispatch as td
from tiledispatch.build.pool import compilations
from tiledispatch.bundle import active, export
from tiledispatch.bundle.export import export_bundle
from tiledispatch.bundle.manifest import open_bundle
from tiledispatch.dispatch import defaults
from tiledispatch.select import cost_model
from tiledispatch.select.tuning_db import TuningDB
from tiledispatch.testing import small_config
from tiledispatch.testing import small_defaults as small

GEMM = small_config()                                   # fp16 tiled, in the session's shared set
CONV = small.config(small.conv_key("fwd", "fp16", 2))   # the small default kernel of fp16 2D convs
OTHER = small_config(block=(64, 32, 32))                # never exported
DEVICE, SIGNATURE = "NVIDIA H100 80GB HBM3", "gemm|fp16|rcr|4096x4096x4096"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A bundle of GEMM and CONV for sm_90, with one tuning entry of this machine's tuning DB."""
    root = tmp_path_factory.mktemp("bundle")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEDISPATCH_TUNING_DB", str(root / "tuning.json"))
        TuningDB("sm_90").store(DEVICE, SIGNATURE, GEMM.name, {GEMM.name: 0.5})
        report = export_bundle(root / "b", configs=[GEMM, CONV], arch="sm_90", max_workers=2)
    return Path(report.path), report


@pytest.fixture
def copy(exported, tmp_path):
    """A private copy of the bundle, to damage."""
    import shutil

    target = tmp_path / "copy"
    shutil.copytree(exported[0], target)
    return target


@pytest.fixture(autouse=True)
def no_bundle(monkeypatch, tmp_path):
    """Each test starts and ends without an active bundle, with an empty cache of its own."""
    monkeypatch.delenv("TILEDISPATCH_BUNDLE", raising=False)
    monkeypatch.delenv("TILEDISPATCH_BUNDLE_STRICT", raising=False)
    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    active.deactivate()
    yield
    active.deactivate()
    defaults.reset()


def registry_of(*configs):
    registry = td.Registry("sm_90")
    for cfg in configs:
        registry.add(cfg)
    return registry


def test_manifest_lists_versions_arch_and_a_sha256_per_file(exported):
    import triton

    path, report = exported
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "tiledispatch-bundle" and manifest["format_version"] == 1
    assert (manifest["tiledispatch"], manifest["triton"], manifest["torch"]) == (
        td.__version__, triton.__version__, str(torch.__version__))
    assert manifest["arch"] == "sm_90" and manifest["cuda_target"] == {"backend": "cuda", "arch": 90,
                                                                      "warp_size": 32}
    assert manifest["created"].endswith("Z") and set(manifest["kernels"]) == {GEMM.name, CONV.name}
    on_disk = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((path / rel).read_bytes()).hexdigest() == digest, rel
    cubins = [rel for rel in on_disk if rel.endswith(".cubin")]
    assert len(cubins) >= 2 and all((path / rel).read_bytes()[:4] == b"\x7fELF" for rel in cubins)
    # the fp16 conv kernel is ranked by the bf16 conv model (cost_model.STAND_IN): the bundle ships it
    assert manifest["models"] == ["sm_90/conv_fwd_bf16", "sm_90/gemm_none_fp16"]
    assert manifest["tuning_entries"] == 1 and report.kernels == 2 and report.bytes == manifest["bytes"]


def test_load_then_build_compiles_nothing_and_runs(exported, tmp_path):
    path, _ = exported
    bundle = td.load_bundle(path)
    before = compilations()
    registry = registry_of(GEMM, CONV)
    report = registry.build(max_workers=2)
    assert compilations() == before and report.built == [] and report.cached == []
    assert sorted(report.from_bundle) == sorted([GEMM.name, CONV.name]) and "2 from the bundle" in str(report)
    assert bundle.stats()["compiled"] == 0 and bundle.stats()["served"] == 2
    assert all(k.entry_dir.is_relative_to(path) for k in registry)
    assert not (tmp_path / "empty-cache" / "sm_90").exists()   # nothing written to the local cache
    a, b = torch.randn(40, 24, dtype=torch.float16), torch.randn(16, 24, dtype=torch.float16).t()
    out = registry.get(GEMM.name).run(a, b)   # the bundle's entry, on Triton's interpreter
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)


def test_selection_reads_the_bundles_models_and_tuning_entries(exported):
    path, _ = exported
    td.load_bundle(path)
    assert cost_model.model_dir("sm_90", "gemm_none_fp16").is_relative_to(path)
    assert cost_model.model_dir("sm_90", "conv_fwd_bf16").is_relative_to(path)   # fp16 convs' stand-in
    packaged = cost_model.models_root() / "sm_90" / "conv_bwd_data_bf16"
    assert cost_model.model_dir("sm_90", "conv_bwd_data_bf16") == packaged   # not in the bundle: the package's
    assert TuningDB("sm_90").lookup(DEVICE, SIGNATURE)["kernel"] == GEMM.name
    assert TuningDB("sm_80").lookup(DEVICE, SIGNATURE) is None
    active.deactivate()
    assert TuningDB("sm_90").lookup(DEVICE, SIGNATURE) is None


def test_a_kernel_the_bundle_lacks_compiles_with_a_warning_or_is_refused_when_strict(exported, caplog):
    path, _ = exported
    td.load_bundle(path, strict=True)
    before = compilations()
    with pytest.raises(td.BundleError) as info:
        registry_of(GEMM, OTHER).build(max_workers=1)
    assert info.value.field == "kernel" and OTHER.name in str(info.value) and compilations() == before
    td.load_bundle(path)
    report = registry_of(GEMM, OTHER).build(max_workers=1)
    assert report.built == [OTHER.name] and report.from_bundle == [GEMM.name]
    assert any("lacks 1 kernel" in r.getMessage() and OTHER.name in r.getMessage() for r in caplog.records)


def test_default_registries_take_the_bundles_preset_and_kernels(copy):
    """A bundle whose gemm_fp16_rcr_essential preset holds GEMM only (edited, manifest rewritten): td.gemm's
    default registry declares that preset from the bundle and takes its kernel from it."""
    name = "gemm_fp16_rcr_essential"
    rel = f"presets/{name}.json"
    (copy / "presets").mkdir()
    (copy / rel).write_text(json.dumps({"configs": [GEMM.name]}))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["presets"].append(name)
    manifest["files"][rel] = hashlib.sha256((copy / rel).read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    bundle = td.load_bundle(copy)   # forgets the small defaults: the real default registries are made again
    before = compilations()
    a, b = torch.randn(24, 40, dtype=torch.float16), torch.randn(16, 40, dtype=torch.float16).t()
    torch.testing.assert_close(td.gemm(a, b).float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
    registry = defaults.registries()[("gemm", "fp16", "rcr", td.Epilogue())]
    assert [k.name for k in registry if k.built and k.entry_dir is not None] == [GEMM.name]
    assert registry.get(GEMM.name).entry_dir.is_relative_to(copy) and compilations() == before
    assert bundle.stats()["served"] == 1


@pytest.mark.parametrize("damage, words", [
    ("tamper", "does not match its sha256"),
    ("delete", "is missing"),
    ("add", "is not listed"),
])
def test_a_tampered_or_incomplete_bundle_is_refused(copy, damage, words):
    cubin = next(copy.rglob("*.cubin"))
    if damage == "tamper":
        data = bytearray(cubin.read_bytes())
        data[len(data) // 2] ^= 0xFF
        cubin.write_bytes(bytes(data))
    elif damage == "delete":
        cubin.unlink()
    else:
        (cubin.parent / "extra.cubin").write_bytes(b"\x7fELF")
    with pytest.raises(td.BundleError) as info:
        td.load_bundle(copy)
    assert info.value.field == "files" and words in str(info.value) and isinstance(info.value, ValueError)
    assert active.current() is None


def test_a_bundle_for_another_arch_or_version_is_refused(exported, monkeypatch):
    import triton

    from tiledispatch import version

    path, _ = exported
    monkeypatch.setenv("TILEDISPATCH_ARCH", "sm_80")   # no GPU here: the configured arch is the device's
    with pytest.raises(td.BundleError, match="holds kernels for sm_90, this device is sm_80") as info:
        td.load_bundle(path)
    assert info.value.field == "arch"
    monkeypatch.delenv("TILEDISPATCH_ARCH")
    monkeypatch.setattr(triton, "__version__", "9.9.9")
    with pytest.raises(td.BundleError, match="Triton 3.*this process runs Triton 9.9.9") as info:
        td.load_bundle(path)
    assert info.value.field == "triton"
    monkeypatch.undo()
    monkeypatch.setattr(version, "__version__", "0.0.dev")
    with pytest.raises(td.BundleError) as info:
        td.load_bundle(path)
    assert info.value.field == "tiledispatch" and "0.0.dev" in str(info.value) and active.current() is None


def test_not_a_bundle_or_a_malformed_manifest_is_refused(copy, tmp_path):
    with pytest.raises(td.BundleError) as info:
        td.load_bundle(tmp_path / "nowhere")
    assert info.value.field == "bundle"
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "format_version": 2}))
    with pytest.raises(td.BundleError) as info:
        td.load_bundle(copy)
    assert info.value.field == "format_version"
    (copy / "manifest.json").write_text(json.dumps({**manifest, "kernels": [1]}))
    with pytest.raises(td.BundleError) as info:
        td.load_bundle(copy)
    assert info.value.field == "manifest"


def test_the_environment_variable_loads_it_on_first_use_and_refuses_a_bad_one(exported, copy, monkeypatch):
    path, _ = exported
    monkeypatch.setenv("TILEDISPATCH_BUNDLE", str(path))
    before = compilations()
    report = registry_of(GEMM).build(max_workers=1)
    assert report.from_bundle == [GEMM.name] and compilations() == before
    assert active.current().path == path
    next(copy.rglob("*.cubin")).unlink()
    monkeypatch.setenv("TILEDISPATCH_BUNDLE", str(copy))
    with pytest.raises(td.BundleError, match="is missing"):   # no fallback to compiling
        registry_of(GEMM).build(max_workers=1)
    assert compilations() == before
    monkeypatch.delenv("TILEDISPATCH_BUNDLE")
    assert active.current() is None


def test_an_interrupted_export_leaves_no_bundle(isolated_cache, tmp_path, monkeypatch):
    calls = []

    def failing_hash(path):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt   # Ctrl-C while the bundle is being written
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    monkeypatch.setattr(export, "sha256_of", failing_hash)
    with pytest.raises(KeyboardInterrupt):
        export_bundle(tmp_path / "out", configs=[GEMM, CONV], arch="sm_90", cache_dir=isolated_cache)
    assert len(calls) == 3 and list(tmp_path.iterdir()) == []   # neither the bundle nor its staging dir


def test_an_existing_bundle_is_replaced_only_with_force(isolated_cache, tmp_path):
    out = tmp_path / "b"
    export_bundle(out, configs=[GEMM], arch="sm_90", cache_dir=isolated_cache)
    with pytest.raises(td.BundleError) as info:
        export_bundle(out, configs=[GEMM, CONV], arch="sm_90", cache_dir=isolated_cache)
    assert info.value.field == "out" and len(open_bundle(out).kernels) == 1
    export_bundle(out, configs=[GEMM, CONV], arch="sm_90", cache_dir=isolated_cache, force=True)
    assert len(open_bundle(out).kernels) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]   # no staging or old copy left beside it
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(td.BundleError, match="not a bundle"):
        export_bundle(tmp_path / "mine", configs=[GEMM], arch="sm_90", cache_dir=isolated_cache, force=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize("text, parsed", [("none", ("none", "none")), ("relu+bias", ("relu", "col")),
                                          ("bias_row + GELU", ("gelu", "row")), ("silu", ("silu", "none"))])
def test_parse_epilogue(text, parsed):
    assert export.parse_epilogue(text) == parsed


@pytest.mark.parametrize("text", ["", "relu+gelu", "bias+swish"])
def test_parse_epilogue_refuses_unknown_words(text):
    with pytest.raises(td.BadInput) as info:
        export.parse_epilogue(text)
    assert info.value.field == "epilogue"


def test_epilogues_add_each_presets_fused_instances(isolated_cache, tmp_path, monkeypatch):
    """One-kernel presets (stand-ins for packaged ones), exported with a fused relu + bias: the bundle
    holds the instances td.gemm(bias=..., activation="relu") and td.conv(x, w, bias, activation="relu")
    declare."""
    from tiledispatch import presets

    backward = small.config(small.conv_key("bwd_data", "fp16", 2))
    fake = {"one_gemm": [GEMM], "one_conv": [CONV], "one_bwd": [backward]}
    monkeypatch.setattr(presets, "load_preset", lambda name: list(fake[name]))
    monkeypatch.setattr(export, "load_preset", lambda name: list(fake[name]))
    monkeypatch.setattr(export, "preset_text",
                        lambda name: json.dumps({"configs": [c.name for c in fake[name]]}))
    report = export_bundle(tmp_path / "b", ["one_gemm", "one_conv", "one_bwd"], arch="sm_90",
                           epilogues=["relu+bias"], cache_dir=isolated_cache, max_workers=2)
    bundle = open_bundle(report.path)
    expected = {GEMM.name, CONV.name, GEMM.with_epilogue(td.Epilogue("relu", "col")).name,
                CONV.with_epilogue("relu", True).name, backward.name}   # backward: no fused epilogue
    assert report.skipped == {}
    assert set(bundle.kernels) == expected and bundle.manifest["epilogues"] == ["relu+bias"]
    with pytest.raises(td.BadInput, match="per output channel"):
        export_bundle(tmp_path / "c", ["one_conv"], arch="sm_90", epilogues=["bias_row"],
                      cache_dir=isolated_cache)
