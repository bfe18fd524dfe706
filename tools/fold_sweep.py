"""Fold a dataset that a device sweep resumed back into the committed one (data/<gpu>/<name>), after checks.

A device call copies data/<gpu>/<name>, resumes it with new problems and returns it as a tar
(tools/gpu_sweeps.sh). Before it replaces the committed directory this checks that the two datasets are of
the same op, direction, dtype and GPU; that the rows of the same hardware and software versions carry no
duplicate pair; and that every committed row is in the returned dataset, unchanged in every column. It then
packs the result into one part (`Dataset.compact`) and reports what the sweep added: rows by status, new
problems, and problems that still have no ok kernel. Nothing is replaced when a check fails.

Usage:  python tools/fold_sweep.py RETURNED.tar|DIR [--into data/h200] [--dry-run]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KEY = ["problem", "kernel"]
VERSIONS = ("gpu", "arch", "tiledispatch", "triton", "torch", "cuda", "schema_version")


class FoldError(SystemExit):
    """A check failed: the message says which, and nothing was replaced."""


def unpack(source: Path, scratch: Path) -> Path:
    """A scratch copy of the dataset directory of `source` (a tar holding one dataset directory, or it)."""
    if source.is_dir():
        shutil.copytree(source, scratch / source.name)
    else:
        with tarfile.open(source) as tar:
            tar.extractall(scratch, filter="data")
    found = [p.parent for p in scratch.rglob("manifest.json")]
    if len(found) != 1:
        raise FoldError(f"{source}: expected one dataset directory, found {len(found)}")
    return found[0]


def compare(old_frame: Any, new_frame: Any) -> dict[str, Any]:
    """What the returned rows add to the committed ones; FoldError where the committed rows are not kept."""
    import pandas as pd

    if list(new_frame.columns) != list(old_frame.columns):
        raise FoldError(f"columns differ: {sorted(set(new_frame.columns) ^ set(old_frame.columns))}")
    from tiledispatch.bench.analysis import duplicate_pairs

    for frame, which in ((old_frame, "committed"), (new_frame, "returned")):
        dups = duplicate_pairs(frame)
        if dups:
            raise FoldError(f"the {which} dataset holds {dups} duplicate (problem, kernel) pair(s)")
    old, new = old_frame.set_index(KEY).sort_index(), new_frame.set_index(KEY)
    missing = old.index.difference(new.index)
    if len(missing):
        raise FoldError(f"{len(missing)} committed pair(s) not returned, e.g. {missing[0]}")
    kept = new.loc[old.index]
    changed = [c for c in old.columns if not _same(old[c], kept[c])]
    if changed:
        raise FoldError(f"committed rows changed in column(s) {changed}")
    added = new.loc[new.index.difference(old.index)].reset_index()
    ok = new_frame[new_frame["status"] == "ok"]
    return {"rows": [len(old_frame), len(new_frame)], "added_rows": len(added),
            "added_by_status": {str(k): int(v) for k, v in added["status"].value_counts().items()},
            "problems": [int(old_frame["problem"].nunique()), int(new_frame["problem"].nunique())],
            "new_problems": len(set(added["problem"]) - set(old_frame["problem"])),
            "problems_without_ok_kernel": int(new_frame["problem"].nunique() - ok["problem"].nunique()),
            "versions": {c: sorted(map(str, pd.unique(new_frame[c]))) for c in VERSIONS if c in new_frame}}


def _same(a: Any, b: Any) -> bool:
    """Equal value by value (1 == 1.0: parts written apart may type a column differently), NaN equal NaN."""
    import pandas as pd

    x, y = a.to_numpy(dtype=object), b.to_numpy(dtype=object)
    return bool(((x == y) | (pd.isna(x) & pd.isna(y))).all())


def fold(returned: Path, committed: Path, dry_run: bool) -> dict[str, Any]:
    from tiledispatch.bench.dataset import Dataset
    from tiledispatch.errors import BadInput

    theirs, ours = Dataset(returned), Dataset(committed)
    mine = ours.manifest()
    try:   # the check a resumed sweep makes: same op, direction, dtype and GPU
        theirs.open(mine["op"], mine["direction"], mine["dtype"], mine["gpu"], resume=True, extra={})
    except BadInput as exc:
        raise FoldError(f"the returned dataset is not this one resumed: {exc}") from exc
    report = compare(ours.frame(), theirs.frame())
    if theirs.corrupt or ours.corrupt:
        raise FoldError(f"damaged parts: {[str(p) for p in theirs.corrupt + ours.corrupt]}")
    if not dry_run:
        with theirs.lock():
            theirs.compact()
        staged = committed.with_name(committed.name + ".folding")
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(returned, staged, ignore=shutil.ignore_patterns(".lock", "corrupt"))
        shutil.rmtree(committed)
        staged.rename(committed)
        report["size_mib"] = round(sum(p.stat().st_size for p in Dataset(committed).parts()) / 2**20, 2)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="the returned dataset: a tar of one directory, or it")
    parser.add_argument("--into", type=Path, default=ROOT / "data" / "h200", help="the committed datasets")
    parser.add_argument("--dry-run", action="store_true", help="check and report, replace nothing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        returned = unpack(args.source, Path(scratch))
        committed = args.into / returned.name
        if not committed.is_dir():
            raise FoldError(f"{committed} does not exist: nothing to fold into")
        report = fold(returned, committed, args.dry_run)
    print(json.dumps({"dataset": str(committed), "dry_run": args.dry_run, **report}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
