"""tools/probe_fp8_gluon.py: the chunked, lagged-promotion fp8 kernel builds for sm_90 without a GPU, and ptxas
keeps its pipelining: the SASS has exactly the wgmma waits the PTX asks for (a serialized kernel gets one wait per
wgmma instruction), and inside a chunk a block's partial is waited for with the next block's group outstanding."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiledispatch.arch.spec import get_arch

ROOT = Path(__file__).resolve().parents[2]
# Built in a fresh process: once Triton's interpreter has run in a process (the CPU suite runs it), Gluon's code
# generator there gets raw IR values for a kernel's scalar arguments and fails.
BUILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import probe_fp8_gluon as probe
tile, ws = json.loads(sys.argv[2])
print(json.dumps({"tiles": probe.WS_TILES if ws else probe.TILES, "build": probe.build(tuple(tile), ws)}))
"""


def build(tile: tuple, ws: bool) -> tuple[list, dict]:
    done = subprocess.run([sys.executable, "-c", BUILD, str(ROOT / "tools"), json.dumps([tile, ws])],
                          check=True, capture_output=True, text=True, timeout=300)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return [tuple(t) for t in out["tiles"]], out["build"]


# single partition: 128x128 with chunks of 2 (no spill) and 4 (at the register limit), 128x64 with chunks of 8
# (the longest chunk); warp-specialized: 128x128 with chunks of 2 (its two consumer partitions each compiled)
@pytest.mark.parametrize("ws,tile", [(False, (128, 128, 128, 8, 6, 2)), (False, (128, 128, 128, 8, 4, 4)),
                                     (False, (128, 64, 128, 8, 8, 8)), (True, (128, 128, 128, 4, 5, 2))])
def test_chunked_promotion_is_not_serialized(ws, tile):
    tiles, res = build(tile, ws)
    assert tile in tiles
    chunk, consumers = tile[5], 2 if ws else 1
    # one wgmma group per K block: the chunk's blocks and the tail loop's block, each BK / 32 instructions
    # (per consumer partition in the ws form, where each warp group issues its own 64 rows)
    assert res["wgmma"] == consumers * (chunk + 1) * tile[2] // 32
    # chunk - 1 lagged waits (one group outstanding), the chunk's last wait and the tail loop's wait
    assert res["ptx_waits"] == ([1] * (chunk - 1) + [0, 0]) * consumers
    assert res["sass_waits"] == len(res["ptx_waits"]), "ptxas serialized the wgmmas"
    assert res["stack"] == 0 or chunk > 2
    assert res["shared"] <= get_arch("sm_90").smem_per_block
