"""Cache entries without compiling: fingerprints, atomic publish, corruption detection, stats and clear."""
from __future__ import annotations

import json
import os

import pytest

from tiledispatch.build import cache
from tiledispatch.build.compile import CompileTask
from tiledispatch.fsutil import atomic_write_text


def test_fingerprint_depends_on_source_arch_and_versions(monkeypatch):
    fp = cache.fingerprint("src", "sm_90")
    assert fp == cache.fingerprint("src", "sm_90") and len(fp) == 24
    assert fp != cache.fingerprint("src2", "sm_90") and fp != cache.fingerprint("src", "sm_80")
    import triton

    monkeypatch.setattr(triton, "__version__", "0.0.0-other")
    assert cache.fingerprint("src", "sm_90") != fp
    monkeypatch.undo()
    monkeypatch.setattr("tiledispatch.version.__version__", "9.9.9")
    assert cache.fingerprint("src", "sm_90") != fp


def fake_entry(root, name="gemm-x", fp="f" * 24, payload=b"cubin-bytes"):
    staging = cache.new_staging_dir(root, "sm_90")
    (staging / "k.cubin").write_bytes(payload)
    (staging / cache.SOURCE).write_text("# source")
    final = cache.entry_dir(root, "sm_90", name, fp)
    return cache.publish(staging, final, {"name": name, "arch": "sm_90", "fingerprint": fp}), staging


def test_publish_writes_a_complete_entry_atomically(tmp_path):
    final, staging = fake_entry(tmp_path)
    assert final == tmp_path / "sm_90" / "gemm-x" / ("f" * 24)
    assert not staging.exists()
    manifest = cache.read_entry(final)
    assert manifest["name"] == "gemm-x" and set(manifest["files"]) == {"k.cubin", cache.SOURCE}
    assert manifest["files"]["k.cubin"] == cache.sha256_file(final / "k.cubin")


def test_losing_publisher_keeps_the_winners_entry(tmp_path):
    final, _ = fake_entry(tmp_path, payload=b"winner")
    again, staging = fake_entry(tmp_path, payload=b"loser")
    assert again == final and not staging.exists()
    assert (final / "k.cubin").read_bytes() == b"winner" and cache.read_entry(final) is not None


def test_losing_publisher_raises_if_the_existing_entry_is_corrupt(tmp_path):
    final, _ = fake_entry(tmp_path)
    (final / "k.cubin").write_bytes(b"garbage")
    with pytest.raises(OSError):
        fake_entry(tmp_path)


@pytest.mark.parametrize("damage", ["file", "manifest-json", "manifest-files", "no-manifest", "extra-listed"])
def test_read_entry_detects_corruption(tmp_path, damage):
    final, _ = fake_entry(tmp_path)
    manifest_path = final / cache.MANIFEST
    if damage == "file":
        (final / "k.cubin").write_bytes(b"cubin-bytez")
    elif damage == "manifest-json":
        manifest_path.write_text("{")
    elif damage == "manifest-files":
        manifest_path.write_text(json.dumps({"name": "gemm-x"}))
    elif damage == "no-manifest":
        manifest_path.unlink()
    else:
        data = json.loads(manifest_path.read_text())
        data["files"]["missing.cubin"] = "0" * 64
        manifest_path.write_text(json.dumps(data))
    assert cache.read_entry(final) is None


def test_remove_entry_and_missing_entries(tmp_path):
    final, _ = fake_entry(tmp_path)
    cache.remove_entry(final)
    assert not final.exists() and not list(final.parent.iterdir())
    cache.remove_entry(final)   # already gone: no error
    assert cache.read_entry(final) is None


def test_stats_and_clear(tmp_path):
    assert cache.cache_stats(tmp_path / "none") == {"root": str(tmp_path / "none"), "entries": 0, "bytes": 0}
    fake_entry(tmp_path, "gemm-a")
    fake_entry(tmp_path, "gemm-b")
    (tmp_path / "stray.txt").write_text("x")
    stats = cache.cache_stats(tmp_path)
    assert stats["entries"] == 2 and stats["bytes"] > 0
    assert cache.clear(tmp_path) == 2
    assert list(tmp_path.iterdir()) == [] and cache.cache_stats(tmp_path)["entries"] == 0


def test_compile_task_entry_path():
    task = CompileTask("gemm-x", "sm_90", 90, "abc", "src", "/c")
    assert str(task.entry) == os.path.join("/c", "sm_90", "gemm-x", "abc")


def test_atomic_write_leaves_no_temporaries(tmp_path):
    target = tmp_path / "sub" / "f.json"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two" and [p.name for p in target.parent.iterdir()] == ["f.json"]
