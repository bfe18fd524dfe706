"""tools/probe_fp8_gluon.py: the chunked, lagged-promotion fp8 kernel builds for sm_90 without a GPU, and ptxas
keeps its pipelining: the SASS has exactly the wgmma waits the PTX asks for (a serialized kernel gets one wait per
wgmma instruction), and inside a chunk a block's partial is waited for with the next block's group outstanding."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probe():
    sys.path.insert(0, str(ROOT / "tools"))   # the probe imports tools/inspect_kernel.py as a sibling
    try:
        spec = importlib.util.spec_from_file_location("probe_fp8_gluon", ROOT / "tools" / "probe_fp8_gluon.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(ROOT / "tools"))


# single partition: 128x128 with chunks of 2 (no spill) and 4 (at the register limit), 128x64 with chunks of 8
# (the longest chunk); warp-specialized: 128x128 with chunks of 2 (its two consumer partitions each compiled)
@pytest.mark.parametrize("ws,tile", [(False, (128, 128, 128, 8, 6, 2)), (False, (128, 128, 128, 8, 4, 4)),
                                     (False, (128, 64, 128, 8, 8, 8)), (True, (128, 128, 128, 4, 5, 2))])
def test_chunked_promotion_is_not_serialized(probe, ws, tile):
    assert tile in (probe.WS_TILES if ws else probe.TILES)
    res = probe.build(tile, ws)
    chunk, consumers = tile[5], 2 if ws else 1
    # one wgmma group per K block: the chunk's blocks and the tail loop's block, each BK / 32 instructions
    # (per consumer partition in the ws form, where each warp group issues its own 64 rows)
    assert res["wgmma"] == consumers * (chunk + 1) * tile[2] // 32
    # chunk - 1 lagged waits (one group outstanding), the chunk's last wait and the tail loop's wait
    assert res["ptx_waits"] == ([1] * (chunk - 1) + [0, 0]) * consumers
    assert res["sass_waits"] == len(res["ptx_waits"]), "ptxas serialized the wgmmas"
    assert res["stack"] == 0 or chunk > 2
    assert res["shared"] <= 232448   # fits an sm_90 SM's shared memory
