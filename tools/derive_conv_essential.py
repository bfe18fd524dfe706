"""Choose the instances of the conv `_essential` presets from the committed sweeps by greedy set cover.

Per direction, every problem of data/<gpu>/conv_<direction>_bf16 (2D and 3D) is an item; an instance is its
config without ndim and dtype (the row tuple of tools/make_conv_presets.py). tools/derive_presets.greedy_cover
adds, step by step, the instance that most lowers the summed log slowdown against each problem's best time,
until every problem is within the tolerance or --max-kernels are chosen. The result is written to
tools/conv_essential.json, which tools/make_conv_presets.py reads (the instances below align 8 stay essential as
well: they are the fallbacks for problems no align-8 instance can take).

    python tools/derive_conv_essential.py [--data data/h200] [--max-kernels 14] [--tolerance 0.02]

--extend K keeps the chosen instances and adds up to K per direction: the cover continues from every instance
of the current bf16 essential presets (derived, suite winners, fallbacks), over the problems the shipped conv
model of the direction trained on (its held-out ones stay unseen, so tools/essential_holdout.py can score
the result on them).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from derive_presets import greedy_cover  # tools/ is the script's directory

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "conv_essential.json"
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
KEY_FIELDS = ("c_family", "c_block_m", "c_block_n", "c_block_k", "c_groups_per_program", "c_num_warps",
              "c_num_stages", "c_kloop", "c_align", "c_split_k")


def instance_key(values: tuple[Any, ...]) -> str:
    """The row tuple of make_conv_presets (family, BM, BN, BK, groups per program, warps, stages, kloop, align,
    split_k); split_k is named only where it is set (bwd_weight's 0 means chosen per problem)."""
    family, bm, bn, bk, gpp, warps, stages, kloop, align, split = values
    key = f"{family}-{int(bm)}x{int(bn)}x{int(bk)}-g{int(gpp)}-w{int(warps)}-s{int(stages)}-{kloop}-a{int(align)}"
    return key + (f"-k{int(split)}" if int(split) else "")


def times_of(dataset: Path) -> dict[str, dict[str, float]]:
    """problem -> instance key -> median ms of the ok kernel rows."""
    from tiledispatch.bench.dataset import load_frame

    frame = load_frame(dataset)
    ok = frame[(frame["status"] == "ok") & (frame["family"] != "vendor")]
    times: dict[str, dict[str, float]] = {}
    for row in zip(ok["problem"], ok["time_ms"], *(ok[c] for c in KEY_FIELDS)):
        problem, ms, values = row[0], float(row[1]), row[2:]
        if math.isfinite(ms) and ms > 0:
            times.setdefault(problem, {})[instance_key(values)] = ms
    return times


def preset_keys(direction: str) -> list[str]:
    """The instance keys of the current bf16 essential presets of a direction (2-D and 3-D)."""
    from tiledispatch.presets import load_preset

    keys: dict[str, None] = {}
    for ndim in (2, 3):
        for c in load_preset(f"conv_{direction}_bf16_{ndim}d_essential"):
            keys[instance_key((c.family, c.block_m, c.block_n, c.block_k, c.groups_per_program, c.num_warps,
                               c.num_stages, c.kloop, c.align, c.split_k))] = None
    return list(keys)


def held_out(direction: str) -> set[str]:
    """The problems the shipped conv model of `direction` (bf16, sm_90) held out of its training."""
    meta = ROOT / "src" / "tiledispatch" / "models" / "sm_90" / f"conv_{direction}_bf16" / "meta.json"
    return set(json.loads(meta.read_text())["holdout"]["problems"])


def extend(data: Path, count: int, tolerance: float) -> dict[str, Any]:
    """--extend: tools/conv_essential.json's choice plus up to `count` instances per direction."""
    report = json.loads(OUT.read_text())
    for direction in DIRECTIONS:
        skip = held_out(direction)
        times = {p: row for p, row in times_of(data / f"conv_{direction}_bf16").items() if p not in skip}
        result = greedy_cover(times, tolerance=tolerance, max_kernels=count, seed=preset_keys(direction))
        entry = report[direction]
        entry["chosen"] = [*entry["chosen"], *(k for k in result.kernels if k not in entry["chosen"])]
        entry["extended"] = {"added": result.kernels, "wins": {k: len(v) for k, v in result.wins.items()},
                             "problems": len(times), "held_out_left_out": len(skip)}
        print(f"{direction}: +{len(result.kernels)} over {len(times)} problems: {', '.join(result.kernels)}")
    report["extend"] = {"count": count, "tolerance": tolerance,
                        "data": str(data.relative_to(ROOT)) if data.is_relative_to(ROOT) else str(data)}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT / "data" / "h200"))
    parser.add_argument("--max-kernels", type=int, default=14)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--extend", type=int, metavar="K",
                        help="keep the current choice and add up to K instances per direction (see above)")
    args = parser.parse_args(argv)
    data = Path(args.data).resolve()
    if args.extend is not None:
        if args.extend < 1:
            parser.error(f"--extend {args.extend}: give a count >= 1")
        OUT.write_text(json.dumps(extend(data, args.extend, args.tolerance), indent=1) + "\n")
        print(f"wrote {OUT}")
        return 0
    report: dict[str, Any] = {"data": str(data.relative_to(ROOT)) if data.is_relative_to(ROOT) else str(data),
                              "max_kernels": args.max_kernels, "tolerance": args.tolerance}
    for direction in DIRECTIONS:
        times = times_of(data / f"conv_{direction}_bf16")
        result = greedy_cover(times, tolerance=args.tolerance, max_kernels=args.max_kernels)
        ratios = list(result.loss.values())
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        report[direction] = {"chosen": result.kernels, "wins": {k: len(v) for k, v in result.wins.items()},
                             "problems": len(times), "within_tolerance": len(ratios) - len(result.uncovered),
                             "slowdown_geomean": geomean, "slowdown_max": max(ratios)}
        print(f"{direction}: {len(result.kernels)} instances, {len(times)} problems, slowdown geomean "
              f"{geomean:.4f}, max {max(ratios):.2f}, {len(result.uncovered)} beyond {args.tolerance:.0%}")
        for kernel in result.kernels:
            print(f"   {kernel}: best of {len(result.wins[kernel])}")
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
