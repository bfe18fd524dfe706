"""Re-key the conv datasets after ConvProblem's default align learnt 2 and 4 (channel totals that are multiples
of 2 or 4 but not of 8 were align 1 before).

Rows keep their measurements: an instance's kernel does not depend on the problem's align (it only decides
which instances may run), and the sweep's tensors were the same. What changes is the problem's identity: its
signature (`problem`), its JSON and `p_align` become those of the problem with the default align.

    python tools/realign_conv_datasets.py data/h200/conv_fwd_bf16 ...
"""
from __future__ import annotations

import json
import sys

from tiledispatch.bench.dataset import Dataset
from tiledispatch.bench.schema import problem_json, problem_key
from tiledispatch.problems.conv import ConvProblem


def realign(path: str) -> int:
    """Rewrite the dataset at `path` with default-align problems; returns how many rows changed."""
    ds = Dataset(path)
    with ds.lock():
        frame = ds.frame()
        changed = 0
        for text in frame["problem_json"].unique():
            data = json.loads(text)
            problem = ConvProblem.from_dict({**data, "align": None})
            if problem.align == data["align"]:
                continue
            rows = frame["problem_json"] == text
            frame.loc[rows, ["problem", "problem_json", "p_align"]] = (
                problem_key(problem), problem_json(problem), problem.align)
            changed += int(rows.sum())
        if changed:
            ds.rewrite(frame.to_dict("records"))
    return changed


def main() -> None:
    for path in sys.argv[1:]:
        print(f"{path}: {realign(path)} rows re-keyed")


if __name__ == "__main__":
    main()
