"""Real sm_90 builds on the CPU: cubins in the cache, warm rebuilds, corruption, concurrent builders, failures."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tiledispatch as td
from tiledispatch.build import cache
from tiledispatch.codegen import render_source
from tiledispatch.kernels.family import family_module
from tiledispatch.testing import small_config

# Not in the session's shared set: these always compile cold in the test's own cache dir.
FRESH = [small_config("tiled", "rcr", "fp16", block=(64, 32, 32), align=16),
         small_config("tiled", "crr", "bf16", block=(32, 64, 32), activation="silu", bias="row"),
         small_config("splitk", "rrr", "fp32", block=(32, 32, 32), split_k=3, num_d=1)]
ELF_MAGIC = b"\x7fELF"


def registry_of(configs, **kwargs):
    registry = td.Registry("sm_90", **kwargs)
    for cfg in configs:
        registry.add(cfg)
    return registry


def cubins(entry: Path) -> list[Path]:
    return sorted(entry.glob("*.cubin"))


@pytest.fixture(scope="module")
def built_fresh(tmp_path_factory):
    """One cold build (timed) into a private cache, then a warm one (timed) from a new Registry."""
    root = tmp_path_factory.mktemp("fresh-cache")
    cold = registry_of(FRESH, cache_dir=root)
    start = time.perf_counter()
    cold_report = cold.build(max_workers=2)
    cold_s = time.perf_counter() - start
    warm = registry_of(FRESH, cache_dir=root)
    start = time.perf_counter()
    warm_report = warm.build(max_workers=2)
    warm_s = time.perf_counter() - start
    return root, cold, cold_report, cold_s, warm, warm_report, warm_s


def test_cold_build_compiles_real_sm90_cubins(built_fresh):
    root, registry, report, _, _, _, _ = built_fresh
    assert sorted(report.built) == sorted(c.name for c in FRESH) and not report.cached and not report.failed
    assert str(report).startswith("3 built, 0 from cache, 0 failed")
    for kernel in registry:
        assert kernel.built and kernel.entry_dir.is_relative_to(root / "sm_90" / kernel.name)
        manifest = cache.read_entry(kernel.entry_dir)
        assert manifest["name"] == kernel.name and manifest["arch"] == "sm_90"
        expected = len(family_module(kernel.config).entries(kernel.config))   # one cubin per entry
        assert expected == (2 if kernel.config.family == "splitk" and kernel.config.split_k > 16 else 1)
        assert len(cubins(kernel.entry_dir)) == expected
        for cubin in cubins(kernel.entry_dir):
            data = cubin.read_bytes()
            assert data[:4] == ELF_MAGIC and len(data) > 1000
            meta = json.loads(cubin.with_suffix(".json").read_text())
            assert meta["target"]["arch"] == 90 and meta["target"]["backend"] == "cuda"
        assert (kernel.entry_dir / cache.SOURCE).read_text() == render_source(kernel.config)


def test_warm_rebuild_is_served_from_the_cache_at_least_20x_faster(built_fresh):
    _, cold, _, cold_s, warm, report, warm_s = built_fresh
    assert sorted(report.cached) == sorted(c.name for c in FRESH) and not report.built and not report.failed
    assert [k.entry_dir for k in warm] == [k.entry_dir for k in cold]
    assert cold_s >= 20 * warm_s, f"cold {cold_s:.3f} s vs warm {warm_s:.4f} s"


def test_cache_is_keyed_by_arch(built_fresh):
    root = built_fresh[0]
    other = registry_of(FRESH[:1], cache_dir=root)
    other_arch = td.Registry("sm_80", cache_dir=root)
    other_arch.add(FRESH[0])
    assert cache.read_entry(other._task(other.kernels[0]).entry) is not None
    assert cache.read_entry(other_arch._task(other_arch.kernels[0]).entry) is None


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "manifest", "missing"])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path, damage):
    cfg = FRESH[0]
    registry = registry_of([cfg], cache_dir=tmp_path)
    assert registry.build(max_workers=1).built == [cfg.name]
    entry = registry.get(cfg.name).entry_dir
    cubin = cubins(entry)[0]
    if damage == "truncate":
        cubin.write_bytes(cubin.read_bytes()[: len(cubin.read_bytes()) // 2])
    elif damage == "overwrite":
        data = bytearray(cubin.read_bytes())
        data[100:110] = bytes(10)
        cubin.write_bytes(bytes(data))
    elif damage == "manifest":
        (entry / cache.MANIFEST).write_text('{"files": ')
    else:
        cubin.unlink()
    assert cache.read_entry(entry) is None

    # a kernel whose entry went bad refuses to run instead of loading garbage
    stale = registry_of([cfg], cache_dir=tmp_path)
    stale.get(cfg.name).entry_dir = entry
    with pytest.raises(td.CompileError) as info:
        import torch
        stale.get(cfg.name).run(torch.randn(16, 16, dtype=torch.float16),
                                torch.randn(16, 16, dtype=torch.float16).t())
    assert info.value.field == "cache"

    again = registry_of([cfg], cache_dir=tmp_path)
    report = again.build(max_workers=1)
    assert report.built == [cfg.name] and not report.cached
    assert cache.read_entry(again.get(cfg.name).entry_dir) is not None
    assert cubins(again.get(cfg.name).entry_dir)[0].read_bytes()[:4] == ELF_MAGIC
    assert registry_of([cfg], cache_dir=tmp_path).build(max_workers=1).cached == [cfg.name]


BUILDER = textwrap.dedent("""
    import json, sys
    import tiledispatch as td
    registry = td.Registry("sm_90")
    for name in json.loads(sys.argv[1]):
        registry.add(name)
    print(json.dumps(registry.build(max_workers=1).to_dict()))
""")


@pytest.mark.slow
def test_two_builders_at_once_share_one_intact_entry_per_instance(tmp_path):
    names = [c.name for c in FRESH]
    env = {**os.environ, "TILEDISPATCH_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", BUILDER, json.dumps(names)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
        assert not report["failed"], report["failed"]
        assert sorted(report["built"] + report["cached"]) == sorted(names)
    for name in names:
        entries = [p for p in (tmp_path / "sm_90" / name).iterdir() if not p.name.startswith(".")]
        assert len(entries) == 1, entries
        assert cache.read_entry(entries[0]) is not None
    staging = tmp_path / "sm_90" / ".staging"
    assert not staging.exists() or not any(staging.iterdir()), list(staging.iterdir())
    assert registry_of(FRESH, cache_dir=tmp_path).build(max_workers=1).cached == names


def test_compile_failure_is_recorded_per_instance_while_others_build(tmp_path):
    good = FRESH[0]
    bad_triton = small_config("tiled", "rcr", "fp16", block=(16, 32, 32))
    bad_import = small_config("tiled", "rrr", "fp16", block=(16, 32, 32))
    registry = td.Registry("sm_90", cache_dir=tmp_path)
    registry.add(good)
    # valid Python, invalid Triton: fails inside triton.compile
    registry.add(bad_triton, source=render_source(bad_triton).replace("tl.zeros(", "tl.zeros_nonexistent("))
    # valid syntax, fails when the generated module is imported
    registry.add(bad_import, source=render_source(bad_import) + "\nundefined_name_at_import\n")
    report = registry.build(max_workers=2)
    assert report.built == [good.name]
    assert set(report.failed) == {bad_triton.name, bad_import.name}
    assert "zeros_nonexistent" in report.failed[bad_triton.name] or "Compilation" in report.failed[bad_triton.name]
    assert "NameError" in report.failed[bad_import.name]
    assert registry.get(good.name).built and not registry.get(bad_triton.name).built
    for name in (bad_triton.name, bad_import.name):
        assert not (tmp_path / "sm_90" / name).exists() or not any((tmp_path / "sm_90" / name).iterdir())
    staging = tmp_path / "sm_90" / ".staging"
    assert not staging.exists() or not any(staging.iterdir())
    # failures are not cached: a rebuild tries again (and fails again)
    again = registry.build(max_workers=1)
    assert set(again.failed) == {bad_triton.name, bad_import.name} and again.cached == [good.name]
    # an unbuilt kernel cannot run
    import torch
    with pytest.raises(td.NoKernelFound) as info:
        registry.get(bad_triton.name).run(torch.randn(4, 4, dtype=torch.float16),
                                          torch.randn(4, 4, dtype=torch.float16).t())
    assert info.value.field == "kernel"


def test_registry_json_round_trip_and_len(built_fresh):
    root, registry = built_fresh[0], built_fresh[1]
    text = registry.to_json()
    data = json.loads(text)
    assert data["arch"] == "sm_90" and data["kernels"] == [c.name for c in FRESH]
    again = td.Registry.from_json(text, cache_dir=root)
    assert len(again) == len(registry) == len(FRESH)
    assert [k.name for k in again.kernels] == [k.name for k in registry.kernels]
    assert [k.config for k in again] == FRESH and again.arch.name == "sm_90"
    assert again.build(max_workers=1).cached == [c.name for c in FRESH]
    assert td.Registry.from_json(again.to_json(), cache_dir=root).to_json() == text


def test_build_and_interpreted_run_write_no_bytecode_into_the_cache(tmp_path, monkeypatch):
    """A default Python writes bytecode on import. Generated sources are executed without it, so a build's
    staging directory holds only files (the manifest hashes each one: a __pycache__ directory there failed
    every cold build) and a published entry stays as its manifest lists it. The worker processes are spawned
    with the environment of this test, without PYTHONDONTWRITEBYTECODE; this process imports the entry for
    the interpreter with bytecode writing on."""
    import torch

    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cfg = small_config("tiled", "rcr", "fp16", block=(32, 32, 32), align=1, activation="relu")
    registry = registry_of([cfg], cache_dir=tmp_path)
    report = registry.build(max_workers=1)
    assert report.built == [cfg.name] and not report.failed, str(report)
    (kernel,) = registry
    a, b = torch.randn(17, 40, dtype=torch.float16), torch.randn(23, 40, dtype=torch.float16).T
    out = kernel.run(a, b)
    torch.testing.assert_close(out.float(), torch.relu(a.float() @ b.float()), atol=2e-2, rtol=2e-2)
    assert not list(tmp_path.rglob("__pycache__"))
    manifest = cache.read_entry(kernel.entry_dir)
    assert sorted(p.name for p in kernel.entry_dir.iterdir()) == sorted([*manifest["files"], cache.MANIFEST])
