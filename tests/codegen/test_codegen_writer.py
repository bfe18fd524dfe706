"""write_instances: one importable file per instance plus manifest.json; read back and build from it."""
from __future__ import annotations

import json
import py_compile

import pytest

import tiledispatch as td
from tiledispatch.build.loader import import_source
from tiledispatch.codegen import read_manifest, render_source, write_instances
from tiledispatch.codegen.writer import MANIFEST, file_name
from tiledispatch.kernels.family import family_module
from tiledispatch.testing import suites

CONFIGS = suites.select_configs() + [suites.numeric_configs()[-1]]


def test_writes_one_file_per_instance_and_a_manifest(tmp_path):
    manifest_path = write_instances(CONFIGS, tmp_path / "out", "sm_90")
    assert manifest_path == tmp_path / "out" / MANIFEST
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == sorted([MANIFEST] + [file_name(c) for c in CONFIGS])
    manifest = json.loads(manifest_path.read_text())
    assert manifest["arch"] == "sm_90" and manifest["op"] == "gemm" and manifest["tiledispatch"] == td.__version__
    assert [row["name"] for row in manifest["instances"]] == [c.name for c in CONFIGS]
    for row, cfg in zip(manifest["instances"], CONFIGS):
        assert td.GemmConfig.from_dict(row["config"]) == cfg
        assert (tmp_path / "out" / row["file"]).read_text() == render_source(cfg)


@pytest.mark.parametrize("interpret", [False, True])
def test_generated_files_are_importable_python(tmp_path, interpret):
    write_instances(CONFIGS, tmp_path, "sm_90")
    for cfg in CONFIGS:
        path = tmp_path / file_name(cfg)
        py_compile.compile(str(path), doraise=True)
        module = import_source(path, interpret=interpret)
        assert module.NAME == cfg.name and module.CONFIG == cfg.to_dict()
        for entry in family_module(cfg).entries(cfg):
            assert callable(getattr(module, entry.fn))
        assert [e["fn"] for e in module.ENTRIES] == [e.fn for e in family_module(cfg).entries(cfg)]


def test_read_manifest_round_trip_and_errors(tmp_path):
    write_instances(CONFIGS, tmp_path, "sm_90")
    for where in (tmp_path, tmp_path / MANIFEST):
        arch, rows = read_manifest(where)
        assert arch == "sm_90" and [c for c, _ in rows] == CONFIGS
        assert [s for _, s in rows] == [render_source(c) for c in CONFIGS]
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(td.InvalidConfig) as info:
        read_manifest(tmp_path)
    assert info.value.field == "manifest"
    with pytest.raises(td.InvalidConfig):
        read_manifest(tmp_path / "missing")


@pytest.mark.slow
def test_codegen_output_builds_from_the_cache_of_the_same_sources(tmp_path, build_registry):
    build_registry(CONFIGS)        # compiled once for the session
    write_instances(CONFIGS, tmp_path, "sm_90")
    registry = td.Registry("sm_90")
    kernels = registry.add_codegen_output(tmp_path)
    assert [k.name for k in kernels] == [c.name for c in CONFIGS]
    report = registry.build(max_workers=2)
    assert sorted(report.cached) == sorted(c.name for c in CONFIGS) and not report.built and not report.failed


def test_conv_instances_write_and_read_back(tmp_path):
    conv = [td.parse_name("conv-gemm-fwd-2d-fp16-fp16-fp32-64x64x32-g1-w4-s3-k0-tap-a8-none-b0"),
            td.ConvConfig(family="direct", direction="bwd_weight", ndim=3, dtype="bf16", block_m=64, block_n=32,
                          block_k=1, align=1)]
    manifest = json.loads(write_instances(conv, tmp_path / "conv", "sm_90").read_text())
    assert manifest["op"] == "conv" and [row["file"] for row in manifest["instances"]] == [file_name(c) for c in conv]
    assert [c for c, _ in read_manifest(tmp_path / "conv")[1]] == conv
    mixed = json.loads(write_instances(conv[:1] + CONFIGS[:1], tmp_path / "mixed", "sm_90").read_text())
    assert mixed["op"] == "mixed"
