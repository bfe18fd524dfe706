"""tools/overhead_callgrind.py: the per-call slope over loop lengths and the reading of callgrind's dumps
(main thread only, in dump order), on synthetic data (no valgrind run)."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/overhead_callgrind.py")


def test_slope_cancels_the_fixed_cost(tool):
    per_call, residual = tool.slope({1000: 25_000 + 24_300 * 1000, 2000: 25_000 + 24_300 * 2000,
                                     4000: 25_000 + 24_300 * 4000})
    assert per_call == pytest.approx(24_300) and residual == pytest.approx(0, abs=1e-6)
    _, residual = tool.slope({1000: 1000, 2000: 2600, 4000: 4000})
    assert residual > 100   # a point off the line shows in the residual


def _dump(path: Path, part: int, thread: int, trigger: str, total: int) -> None:
    path.write_text(f"# callgrind format\nversion: 1\npart: {part}\nthread: {thread}\n"
                    f"desc: Trigger: {trigger}\n\nevents: Ir\nsummary: {total}\n\nfn=(1) f\n0 {total}\n"
                    f"totals: {total}\n")


def test_parts_of_the_main_thread_in_dump_order(tool, tmp_path):
    base = tmp_path / "callgrind.after"
    after = "--dump-after=functools_reduce"
    for part, thread, trigger, total in [(1, 1, after, 11), (2, 1, after, 22), (10, 1, after, 100),
                                         (2, 2, after, 999), (11, 1, "Program termination", 0)]:
        _dump(tmp_path / f"callgrind.after.{part}-{thread:02d}", part, thread, trigger, total)
    _dump(tmp_path / "callgrind.before.1-01", 1, 1, after, 555)   # another side's file
    assert tool.callgrind_parts(base) == [(after, 11), (after, 22), (after, 100), ("Program termination", 0)]
