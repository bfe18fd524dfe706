"""Synthetic 2-D depthwise and grouped conv layers at align 2 and 4, with tall, wide and square filters, for
the training sweeps: the layer kind of the zoo's last worst pick (an 11x1 depthwise at 12 channels, bwd_data),
which the datasets hold 8 align-4 depthwise bwd_data problems of. Channel counts are multiples of 2 or 4 but
not of 8; groups are depthwise (also with multiplier 2) or 2-8 channels per group; filters k x 1, 1 x k and
k x k for k in 3-11; stride 1 or 2; batch and image size as the zoo's. A seeded sample, without any problem
(any direction) of the zoo or the datasets and without a layer the zoo holds at some batch (train_corpus's
`exclude`); one problems file per direction (`tiledispatch sweep --problems`).

    python tools/train_corpus_dw.py [--out benchmarks/zoo/train_dw_align.json] [--count 300] [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "zoo" / "train_dw_align.json"
KIND = "tiledispatch-train-dw-align"
COUNT = 300
CHANNELS = {2: (6, 10, 14, 18, 22, 26, 30, 34, 42, 46, 50, 54, 58, 66, 70, 78, 90, 102, 114, 126, 150),
            4: (12, 20, 28, 36, 44, 52, 60, 68, 76, 84, 92, 100, 108, 116, 124, 140, 156, 172, 196, 228)}
FILTERS = tuple((k, 1) for k in (3, 5, 7, 9, 11)) + tuple((1, k) for k in (3, 5, 7, 9, 11)) + (
    (3, 3), (5, 5), (7, 7))
SIZES = (7, 12, 14, 17, 28, 35, 56, 112)
BATCHES = (1, 8, 32, 64)


def candidate(rng: random.Random) -> dict[str, Any]:
    """One random layer instance: (problem at fwd, model tag, layer tag, batch)."""
    import tiledispatch as td

    align = rng.choice((2, 4))
    c = rng.choice(CHANNELS[align])
    kind = rng.choice(("depthwise", "depthwise", "multiplier2", "grouped"))
    if kind == "grouped":
        per_group = rng.choice([g for g in (2, 4, 6, 8) if c % g == 0 and g <= c // 2] or [1])
        groups, k = c // per_group, c
    else:
        groups, k = c, c * (2 if kind == "multiplier2" else 1)
    fh, fw = rng.choice(FILTERS)
    h = rng.choice(SIZES)
    w = h if rng.random() < 0.7 else rng.choice(SIZES)
    stride = 1 if rng.random() < 0.75 else 2
    n = rng.choice(BATCHES)
    padding = ((fh // 2, fh // 2), (fw // 2, fw // 2))
    problem = td.ConvProblem("fwd", n, c, k, groups, (h, w), (fh, fw), stride, padding, 1, "bf16")
    layer = f"{kind}_c{c}_k{k}_g{groups}_{fh}x{fw}_s{stride}_{h}x{w}"
    return {"problem": problem, "model": f"synthetic_dw_a{problem.align}", "layer": layer, "batch": n}


def corpus(count: int, seed: int, zoo: dict[str, Any], training: dict[str, set[str]]
           ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`count` distinct kept instances (drawn until then, at most 50 x count draws) and the drop counts."""
    from train_corpus import exclude, zoo_signatures   # tools/ is the script's directory

    zoo_sigs, zoo_layers = zoo_signatures(zoo)
    rng, seen, kept = random.Random(seed), set(), []
    drops = {"duplicate": 0, "excluded": 0}
    for _ in range(50 * count):
        if len(kept) == count:
            break
        item = candidate(rng)
        key = item["problem"].signature()
        if key in seen:
            drops["duplicate"] += 1
            continue
        seen.add(key)
        ok, _ = exclude([item], zoo_sigs, zoo_layers, training)
        drops["excluded"] += not ok
        kept += ok
    return kept, drops


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--count", type=int, default=COUNT)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from train_corpus import DATA, DIRECTIONS, ZOO, dataset_signatures, write

    items, drops = corpus(args.count, args.seed, json.loads(ZOO.read_text()), dataset_signatures(DATA))
    aligns = {a: sum(i["problem"].align == a for i in items) for a in (2, 4)}
    meta = {"kind": KIND, "seed": args.seed, "count": len(items), "drops": drops, "aligns": aligns}
    files = write(args.out, DIRECTIONS, items, meta)
    print(f"{len(items)} layer instances (align 2: {aligns[2]}, align 4: {aligns[4]}), dropped {drops}")
    for path in files.values():
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
