"""tools/carry_cache.py: a cache archive cut down to the kernels of the named presets."""
from __future__ import annotations

import io
import tarfile

import pytest


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/carry_cache.py")


def _archive(path, names):
    with tarfile.open(path, "w:xz") as tar:
        for name in names:
            data = name.encode()
            info = tarfile.TarInfo(f"sm_90/{name}/hash/kernel.cubin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_only_the_presets_kernels_are_kept(tool, tmp_path):
    names, presets = tool.wanted_kernels(["conv_fwd_bf16_2d_essential"])
    assert presets == ["conv_fwd_bf16_2d_essential"] and len(names) > 20
    keep = sorted(names)[:3]
    source, out = tmp_path / "full.tar.xz", tmp_path / "cut.tar.xz"
    _archive(source, [*keep, "conv-not-a-preset-kernel", "gemm-another"])
    members, found = tool.cut(source, out, names)
    assert members == 3 and found == set(keep)
    with tarfile.open(out) as tar:
        assert sorted(m.split("/")[1] for m in tar.getnames()) == keep
        assert tar.extractfile(f"sm_90/{keep[0]}/hash/kernel.cubin").read() == keep[0].encode()


def test_a_pattern_matching_no_preset_is_refused(tool, tmp_path):
    with pytest.raises(SystemExit):
        tool.main([str(tmp_path / "a.tar.xz"), str(tmp_path / "b.tar.xz"), "no_such_preset_*"])
