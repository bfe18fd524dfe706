"""tools/fold_sweep.py: a resumed dataset replaces the committed one only when every committed row comes back
unchanged and the manifests agree; the result is one packed part and a report of what was added."""
from __future__ import annotations

import shutil
import tarfile

import pytest

from tiledispatch.bench.dataset import Dataset
from tiledispatch.bench.schema import Outcome, make_row
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.gemm import GemmProblem

CONFIGS = (GemmConfig(dtype="bf16", block_m=64, block_n=64),
           GemmConfig(dtype="bf16", block_m=128, block_n=64))
STAMP = {"gpu": "NVIDIA H200", "arch": "sm_90", "triton": "3.6.0", "timestamp": "2025-03-04T05:06:07"}


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/fold_sweep.py")


def _rows(m: int, scale: float = 1.0) -> list[dict]:
    problem = GemmProblem(m, 96, 80, dtype="bf16")
    return [make_row(problem, "t", c.name, c, Outcome("ok", time_ms=scale * (0.01 * m + 0.001 * i)), STAMP)
            for i, c in enumerate(CONFIGS)]


def _dataset(path, gpu: str = STAMP["gpu"], sizes: tuple[int, ...] = (64, 80)) -> Dataset:
    dataset = Dataset(path)
    dataset.open("gemm", "none", "bf16", gpu, resume=False, extra={})
    for m in sizes:
        dataset.append(_rows(m))
    return dataset


def _returned(tmp_path, committed: Dataset) -> Dataset:
    """The committed dataset as a device call returns it: a copy, resumed with one more problem."""
    copy = tmp_path / "device" / committed.path.name
    shutil.copytree(committed.path, copy)
    returned = Dataset(copy)
    returned.append(_rows(112))
    return returned


def test_a_resumed_dataset_is_folded_in_as_one_packed_part(tool, tmp_path):
    committed = _dataset(tmp_path / "data" / "gemm_bf16_rcr")
    returned = _returned(tmp_path, committed)
    tar = tmp_path / "gemm_bf16_rcr.tar"
    with tarfile.open(tar, "w") as out:
        out.add(returned.path, arcname="gemm_bf16_rcr")
    assert tool.main([str(tar), "--into", str(tmp_path / "data"), "--dry-run"]) == 0
    assert len(committed.parts()) == 2                      # a dry run replaces nothing
    assert tool.main([str(tar), "--into", str(tmp_path / "data")]) == 0
    folded = Dataset(committed.path)
    assert len(folded.parts()) == 1 and len(folded.frame()) == 6
    assert folded.frame().sort_values(["problem", "kernel"], ignore_index=True).equals(
        returned.frame().sort_values(["problem", "kernel"], ignore_index=True))


def test_the_report_counts_what_the_sweep_added(tool, tmp_path):
    committed = _dataset(tmp_path / "c")
    returned = _returned(tmp_path, committed)
    report = tool.compare(committed.frame(), returned.frame())
    assert report["rows"] == [4, 6] and report["added_rows"] == 2 and report["new_problems"] == 1
    assert report["problems"] == [2, 3] and report["added_by_status"] == {"ok": 2}


def test_a_changed_committed_row_is_refused_and_nothing_replaced(tool, tmp_path):
    committed = _dataset(tmp_path / "data" / "gemm_bf16_rcr")
    returned = _returned(tmp_path, committed)
    frame = returned.frame()
    frame.loc[0, "time_ms"] = frame.loc[0, "time_ms"] * 2
    returned.rewrite(frame.to_dict("records"))
    before = committed.frame()
    with pytest.raises(tool.FoldError, match="time_ms"):
        tool.main([str(returned.path), "--into", str(tmp_path / "data")])
    assert committed.frame().equals(before) and len(committed.parts()) == 2


def test_another_gpu_is_refused(tool, tmp_path):
    committed = _dataset(tmp_path / "data" / "gemm_bf16_rcr")
    other = _dataset(tmp_path / "device" / "gemm_bf16_rcr", gpu="NVIDIA H100 80GB HBM3")
    with pytest.raises(tool.FoldError, match="gpu"):
        tool.main([str(other.path), "--into", str(tmp_path / "data")])
    assert len(committed.parts()) == 2
