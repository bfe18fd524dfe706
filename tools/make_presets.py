"""Regenerate the packaged GEMM presets (src/tiledispatch/presets/*.json).

essential: a hand-picked set of tiles covering large, small-M, skinny-N and long-K shapes, plus unaligned
(a1) fallbacks; _all: the full valid space of the tiled and splitk families, stored as a space description;
_candidates (fp16, bf16, fp8): the broad list of every family that benchmarks/gemm.py --full-matrix sweeps and
tools/derive_presets.py reduces to the measured presets.
"""
from __future__ import annotations

import json
from pathlib import Path

from tiledispatch.arch import get_arch
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.kernels.family import is_valid_config

OUT = Path(__file__).resolve().parents[1] / "src" / "tiledispatch" / "presets"
# (family, BM, BN, BK, warps, stages, split_k, align)
ESSENTIAL = [
    ("tiled", 128, 256, 64, 8, 3, 1, 16), ("tiled", 256, 128, 64, 8, 3, 1, 16),
    ("tiled", 128, 128, 64, 4, 4, 1, 16), ("tiled", 128, 128, 64, 8, 4, 1, 16),
    ("tiled", 128, 128, 32, 4, 4, 1, 16), ("tiled", 128, 64, 64, 4, 4, 1, 16),
    ("tiled", 64, 128, 64, 4, 4, 1, 16), ("tiled", 64, 64, 64, 4, 4, 1, 16),
    ("tiled", 64, 256, 64, 8, 3, 1, 16), ("tiled", 64, 128, 128, 4, 3, 1, 16),
    ("tiled", 32, 128, 128, 4, 4, 1, 16), ("tiled", 16, 128, 128, 4, 4, 1, 16),
    ("tiled", 16, 64, 256, 4, 3, 1, 16), ("tiled", 32, 64, 128, 4, 5, 1, 16),
    ("tiled", 128, 32, 64, 4, 4, 1, 16), ("tiled", 64, 32, 128, 4, 4, 1, 16),
    ("splitk", 64, 64, 128, 4, 3, 4, 16), ("splitk", 64, 128, 64, 4, 4, 4, 16),
    ("splitk", 32, 64, 128, 4, 4, 8, 16), ("splitk", 128, 128, 64, 8, 3, 4, 16),
    ("splitk", 16, 64, 128, 4, 4, 8, 16), ("splitk", 64, 64, 64, 4, 4, 16, 16),
    ("tiled", 128, 128, 32, 4, 3, 1, 1), ("tiled", 64, 64, 32, 4, 3, 1, 1),
    ("tiled", 32, 64, 64, 4, 3, 1, 1), ("tiled", 64, 128, 32, 4, 3, 1, 1),
    ("splitk", 32, 64, 64, 4, 3, 8, 1),
]
# (family, BM, BN, BK, warps, stages, split_k, subtile, align); fp8 doubles BK (at most 128)
CANDIDATES = [
    ("tma_persistent", 128, 256, 64, 8, 3, 1, 1, 16), ("tma_persistent", 128, 256, 64, 8, 4, 1, 2, 16),
    ("tma_persistent", 128, 256, 64, 8, 3, 1, 2, 16), ("tma_persistent", 256, 128, 64, 8, 3, 1, 1, 16),
    ("tma_persistent", 256, 128, 64, 8, 3, 1, 2, 16), ("tma_persistent", 128, 128, 64, 8, 4, 1, 1, 16),
    ("tma_persistent", 128, 128, 64, 4, 4, 1, 1, 16), ("tma_persistent", 128, 128, 64, 8, 5, 1, 2, 16),
    ("tma_persistent", 128, 128, 128, 8, 3, 1, 1, 16), ("tma_persistent", 128, 64, 64, 4, 4, 1, 1, 16),
    ("tma_persistent", 64, 128, 64, 4, 4, 1, 1, 16), ("tma_persistent", 64, 256, 64, 8, 4, 1, 1, 16),
    ("tma_persistent", 64, 64, 64, 4, 5, 1, 1, 16), ("tma_persistent", 64, 128, 128, 4, 3, 1, 1, 16),
    # epilogue through pointer stores (subtile 0): no staging buffer
    ("tma_persistent", 128, 256, 64, 8, 3, 1, 0, 16), ("tma_persistent", 128, 256, 64, 8, 4, 1, 0, 16),
    ("tma_persistent", 128, 128, 64, 4, 4, 1, 0, 16), ("tma_persistent", 128, 128, 64, 4, 6, 1, 0, 16),
    ("tma_persistent", 256, 128, 64, 8, 3, 1, 0, 16), ("tma_persistent", 128, 128, 64, 8, 4, 1, 0, 16),
    # split over K (few output tiles, long K: M <= 256 with K in the thousands); 256-row tiles read B once
    ("tma_persistent", 256, 128, 64, 8, 3, 2, 1, 16), ("tma_persistent", 256, 128, 64, 8, 3, 4, 1, 16),
    ("tma_persistent", 128, 128, 64, 8, 4, 2, 1, 16), ("tma_persistent", 128, 256, 64, 8, 3, 3, 1, 16),
    ("tma_ws", 128, 128, 64, 4, 3, 1, 1, 16), ("tma_ws", 128, 128, 64, 4, 4, 1, 1, 16),
    ("tma_ws", 128, 256, 64, 4, 3, 1, 1, 16), ("tma_ws", 128, 64, 64, 4, 4, 1, 1, 16),
    ("tma_ws", 64, 128, 64, 4, 4, 1, 1, 16), ("tma_ws", 64, 256, 64, 4, 3, 1, 1, 16),
    ("tma_ws", 128, 128, 128, 4, 2, 1, 1, 16),
    ("streamk", 128, 256, 64, 8, 3, 1, 1, 16), ("streamk", 128, 128, 64, 8, 4, 1, 1, 16),
    ("streamk", 128, 128, 64, 4, 4, 1, 1, 16), ("streamk", 64, 128, 64, 4, 4, 1, 1, 16),
    ("streamk", 128, 64, 64, 4, 4, 1, 1, 16), ("streamk", 128, 128, 128, 8, 3, 1, 1, 16),
    # stream-K over 256-row tiles (an M <= 256 problem reads B once) and deeper pipelines
    ("streamk", 256, 128, 64, 8, 3, 1, 1, 16), ("streamk", 256, 128, 64, 8, 4, 1, 2, 16),
    ("streamk", 128, 256, 64, 8, 3, 1, 2, 16), ("streamk", 128, 128, 64, 4, 6, 1, 1, 16),
    ("streamk", 128, 128, 64, 8, 6, 1, 1, 16), ("streamk", 64, 128, 64, 4, 7, 1, 1, 16),
    # partials and data-parallel tiles stored through pointers (H200, 256x6144x4096 bf16, 128x128x64 w4 s6:
    # 36.8 -> 33.9 us against e1)
    ("streamk", 128, 128, 64, 4, 6, 1, 0, 16), ("streamk", 128, 128, 64, 8, 6, 1, 0, 16),
    ("tiled", 16, 64, 128, 4, 4, 1, 1, 16), ("tiled", 16, 128, 128, 4, 4, 1, 1, 16),
    ("tiled", 32, 64, 128, 4, 4, 1, 1, 16), ("tiled", 32, 128, 128, 4, 4, 1, 1, 16),
    ("tiled", 64, 64, 64, 4, 4, 1, 1, 16), ("tiled", 64, 128, 64, 4, 4, 1, 1, 16),
    ("tiled", 16, 256, 64, 4, 4, 1, 1, 16), ("tiled", 64, 32, 128, 4, 4, 1, 1, 16),
    ("splitk", 16, 64, 128, 4, 4, 4, 1, 16), ("splitk", 16, 64, 128, 4, 4, 8, 1, 16),
    ("splitk", 16, 128, 128, 4, 3, 4, 1, 16), ("splitk", 32, 64, 128, 4, 4, 8, 1, 16),
    ("splitk", 64, 64, 128, 4, 3, 4, 1, 16), ("splitk", 64, 128, 64, 4, 4, 4, 1, 16),
    ("splitk", 128, 128, 64, 8, 3, 4, 1, 16), ("splitk", 64, 64, 64, 4, 4, 16, 1, 16),
    ("tiled", 128, 128, 32, 4, 3, 1, 1, 1), ("tiled", 64, 64, 32, 4, 3, 1, 1, 1),
    ("tiled", 32, 64, 64, 4, 3, 1, 1, 1), ("splitk", 32, 64, 64, 4, 3, 8, 1, 1),
    # deep pipelines (6-8 stages): more loads in flight per SM for the small-M, long-K and mid-size shapes
    # (probe on the H200: 256x3584x18944 bf16 rcr 77.9 -> 65.9 us with 128x128x64 w8 k2 s4 -> s6)
    ("tma_persistent", 128, 128, 64, 4, 6, 1, 1, 16), ("tma_persistent", 128, 128, 64, 8, 6, 1, 1, 16),
    ("tma_persistent", 128, 128, 64, 8, 6, 2, 1, 16), ("tma_persistent", 64, 128, 64, 4, 7, 1, 1, 16),
    ("tma_persistent", 64, 128, 64, 4, 8, 2, 1, 16), ("tiled", 64, 32, 128, 4, 8, 1, 1, 16),
    ("tiled", 64, 32, 64, 4, 8, 1, 1, 16), ("tiled", 64, 64, 64, 4, 8, 1, 1, 16),
    ("tiled", 64, 128, 64, 4, 6, 1, 1, 16), ("tiled", 16, 64, 128, 4, 8, 1, 1, 16),
    ("splitk", 16, 64, 128, 4, 8, 4, 1, 16),
]
# fp16 / bf16 candidates added for one layout after its sweep (appended last). rcr: the fastest instances of the
# whole valid grid at 1024^3 (64x128x128 s4) and 1000^3 (64x128x64 s4 with pointer stores) on the H200
# (tools/probe_space.py: results/profiles/probe_space_1000_*_h200.json, probe_space_align_fp16_h200.json)
LAYOUT_CANDIDATES = {"rcr": [("tiled", 64, 128, 128, 4, 4, 1, 1, 16), ("tma_persistent", 64, 128, 128, 4, 4, 1, 1, 16),
                             ("tma_persistent", 64, 128, 64, 4, 4, 1, 0, 16)],
                     "rrr": [("tiled", 64, 128, 64, 4, 7, 1, 1, 16)]}
DTYPES = ("fp16", "bf16", "fp32", "tf32", "int8")
CANDIDATE_COMBOS = [(d, l) for d in ("fp16", "bf16") for l in ("rcr", "rrr", "crr", "ccr")] + [("fp8e4m3", "rcr")]
LAYOUTS = ("rcr", "rrr", "crr", "ccr")


def essential(dtype: str, layout: str) -> list[str]:
    arch = get_arch("sm_90")
    names = []
    for family, bm, bn, bk, w, s, k, a in ESSENTIAL:
        if dtype in ("fp32", "tf32"):   # 4-byte operands: halve the K tile to keep the stages in shared memory
            bk = max(32, bk // 2)
        cfg = GemmConfig(family, layout, dtype, block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s,
                         split_k=k, align=a)
        if is_valid_config(cfg, arch) and cfg.name not in names:
            names.append(cfg.name)
    return names


# fp8 only: 8-byte aligned tiled kernels, which run fp8 problems whose K is a multiple of 8 but not of 16 without
# padded copies (H200 probe, 1000x1000x1000: 64x64x128 a8 13.0 us against 25-57 us for a padded a16 plan)
FP8_CANDIDATES = [("tiled", 64, 64, 64, 4, 4, 1, 1, 8), ("tiled", 64, 128, 64, 4, 4, 1, 1, 8),
                  ("tiled", 128, 64, 64, 4, 4, 1, 1, 8)]


# fp8 tma_ws is the Gluon kernel (kernels/gemm_ws_fp8.py): its own tiles, in place of CANDIDATES' tma_ws rows;
# 192-row tiles (three consumer warp groups) read 20% fewer operand bytes per FLOP than 128-row ones (H200:
# 8192^3 907 -> 789 us, 16384x4096x14336 1760 -> 1435 us)
FP8_WS_CANDIDATES = [("tma_ws", 128, 128, 128, 4, s, 1, 1, 16) for s in (3, 4, 5, 6)] + [
    ("tma_ws", 128, 64, 128, 4, s, 1, 1, 16) for s in (4, 6, 8)] + [
    ("tma_ws", 192, 128, 128, 4, s, 1, 1, 16) for s in (3, 4)] + [
    # split K over deep rings, for few output tiles with a long K (H200: 256x4096x14336 39.7 us at k2 s6 against
    # 43.9 at k2 s4 and 40.8 for the best split tma_persistent; 192-row and 128x64 splits won nowhere)
    ("tma_ws", 128, 128, 128, 4, s, k, 1, 16) for s, k in ((6, 2), (5, 2), (6, 4))]


FP8_WS_NOTE = (" (tma_ws: the Gluon kernel's tiles, 128x128 and 128x64 with rings of 3-8 stages, 192x128 with 3-4, "
               "and 128x128 split K over 2 or 4 units per tile)")


def candidates(dtype: str, layout: str) -> list[str]:
    arch = get_arch("sm_90")
    names = []
    rows = CANDIDATES + (FP8_CANDIDATES if dtype == "fp8e4m3" else [])
    if dtype == "fp8e4m3":
        rows = [r for r in rows if r[0] != "tma_ws"]
        first_ws = next(i for i, r in enumerate(CANDIDATES) if r[0] == "tma_ws")
        rows[first_ws:first_ws] = FP8_WS_CANDIDATES
    else:
        rows = rows + LAYOUT_CANDIDATES.get(layout, [])
    for family, bm, bn, bk, w, s, k, e, a in rows:
        if dtype == "fp8e4m3":
            bk = min(128, 2 * bk)
        cfg = GemmConfig(family, layout, dtype, block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s,
                         split_k=k, subtile=e, align=a)
        if is_valid_config(cfg, arch) and cfg.name not in names:
            names.append(cfg.name)
    return names


# Combos whose essential/compute/memory/latency presets are derived from GPU sweeps (tools/derive_presets.py
# over benchmarks/results/sweeps/); this script leaves them alone.
MEASURED = {("bf16", "rcr"), ("bf16", "rrr"), ("fp16", "rcr"), ("fp16", "rrr"), ("fp8e4m3", "rcr")}


def main() -> None:
    for dtype, layout in CANDIDATE_COMBOS:
        name = f"gemm_{dtype}_{layout}_candidates"
        doc = {"name": name, "op": "gemm", "arch": "sm_90",
               "description": f"{dtype} {layout}: every family's candidate tiles, swept on the GPU to derive the "
                              "measured presets" + (FP8_WS_NOTE if dtype == "fp8e4m3" else ""),
               "configs": candidates(dtype, layout)}
        (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    for dtype in DTYPES:
        for layout in LAYOUTS:
            name = f"gemm_{dtype}_{layout}_essential"
            if (dtype, layout) not in MEASURED:
                doc = {"name": name, "op": "gemm", "arch": "sm_90",
                       "description": f"{dtype} {layout}: large, small-M, skinny and long-K tiles, split-K, "
                                      "unaligned fallbacks", "configs": essential(dtype, layout)}
                (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
            name = f"gemm_{dtype}_{layout}_all"
            doc = {"name": name, "op": "gemm", "description": f"the full valid space of tiled + splitk, {dtype} "
                                                             f"{layout}, sm_90",
                   "space": {"families": ["tiled", "splitk"], "dtype": dtype, "layout": layout, "arch": "sm_90"}}
            (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
