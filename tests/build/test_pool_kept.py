"""The kept pool of on-demand compiles (build/pool.py, run_tasks(keep=True)): consecutive batches run on the
same worker processes instead of spawning new ones; an idle pool shuts down after KEEP_IDLE_S; a batch whose
worker dies drops the pool, and the next batch gets a fresh one. Tasks run stand-in sources (no Triton
compile: `ENTRIES = []`) that record their worker's pid."""
from __future__ import annotations

import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from tiledispatch.build import pool
from tiledispatch.build.compile import CompileTask
from tiledispatch.build.pool import run_tasks

RECORD = "import os\nopen({pids!r} + '/' + str(os.getpid()), 'a').close()\nENTRIES = []\n"


def task(root: Path, pids: Path, i: int, source: str = RECORD) -> CompileTask:
    return CompileTask(f"gemm-k{i}", "sm_90", 90, f"{i:024d}", source.format(pids=str(pids)), str(root))


@pytest.fixture
def dirs(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    yield tmp_path / "cache", pids
    pool._KEPT.shutdown()


def workers(pids: Path) -> set[int]:
    return {int(p.name) for p in pids.iterdir()}


def test_kept_batches_share_their_worker_fresh_ones_do_not(dirs):
    root, pids = dirs
    for i in range(3):
        (result,) = run_tasks([task(root, pids, i)], 1, keep=True)
        assert result.ok
    assert len(workers(pids)) == 1 and pool._KEPT.alive()
    for path in pids.iterdir():
        path.unlink()
    for i in range(3, 5):
        run_tasks([task(root, pids, i)], 1)
    assert len(workers(pids)) == 2


def test_an_idle_kept_pool_shuts_down(dirs, monkeypatch):
    root, pids = dirs
    monkeypatch.setattr(pool, "KEEP_IDLE_S", 0.2)
    run_tasks([task(root, pids, 0)], 1, keep=True)
    assert pool._KEPT.alive()
    deadline = time.monotonic() + 10
    while pool._KEPT.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pool._KEPT.alive()
    run_tasks([task(root, pids, 1)], 1, keep=True)          # starts again when needed
    assert len(workers(pids)) == 2


def test_a_dead_worker_drops_the_kept_pool(dirs):
    root, pids = dirs
    run_tasks([task(root, pids, 0)], 1, keep=True)
    with pytest.raises(BrokenProcessPool):
        run_tasks([task(root, pids, 1, "import os\nos._exit(3)\n")], 1, keep=True)
    assert not pool._KEPT.alive()
    (result,) = run_tasks([task(root, pids, 2)], 1, keep=True)
    assert result.ok and len(workers(pids)) == 2
