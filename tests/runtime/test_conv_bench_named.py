"""benchmarks/conv.py on issue 38's suites without a GPU: the hard suites and --named-categories select
cases at each suite's batch, and `named_summary` gives a geomean per direction x named category."""
from __future__ import annotations

import pytest


def test_hard_suites_and_named_filter(conv) -> None:
    from tiledispatch.problems.conv_suites import named_category

    opts = conv.parse_args(["--suites", "odd_size2d,depthwise7x7", "--named-categories", "odd_size_dense"])
    cases = conv.select_cases(opts)
    assert len(cases) == 14 and {named_category(c.problem) for c in cases} == {"odd_size_dense"}
    assert {c.problem.n for c in cases} == {2, 16}                     # Faster R-CNN 2, YOLOv8m 16
    half = conv.select_cases(conv.parse_args(["--suites", "odd_size2d", "--batch-scale", "0.5",
                                              "--named-categories", "odd_size_dense"]))
    assert {c.problem.n for c in half} == {1, 8}
    every = conv.select_cases(conv.parse_args(["--suites",
                                               "dense3d_video,depthwise7x7,small_group3d,odd_size2d"]))
    assert len(every) == 33 + 16 + 34 + 32
    assert conv.describe_case(cases[0], cases[0].problem)["named_category"] == "odd_size_dense"
    with pytest.raises(SystemExit):
        conv.select_cases(conv.parse_args(["--named-categories", "dense3d"]))


def test_named_summary(conv) -> None:
    def row(d: str, named: str | None, ratio: float | None, case: str) -> dict:
        return {"direction": d, "named_category": named, "tune_ratio": ratio, "auto_ratio": ratio,
                "case": case}

    rows = [row("fwd", "dense_3d", 2.0, "a"), row("fwd", "dense_3d", 0.5, "b"),
            row("fwd", "dense_3d", 1.0, "c"),
            row("bwd_data", "depthwise_7x7", 1.2, "d"), row("bwd_data", "depthwise_7x7", None, "e"),
            row("fwd", None, 0.1, "f"), {"direction": "fwd", "tune_ratio": 0.1, "case": "old"}]
    groups = {(g["direction"], g["named_category"]): g for g in conv.named_summary(rows)}
    assert set(groups) == {("fwd", "dense_3d"), ("bwd_data", "depthwise_7x7")}
    dense = groups["fwd", "dense_3d"]
    assert dense["tune_geomean"] == pytest.approx(1.0) and dense["pass"] and dense["tune_min_case"] == "b"
    dw = groups["bwd_data", "depthwise_7x7"]
    assert (dw["rows"], dw["of"], dw["pass"]) == (1, 2, False)     # a row without a result fails the check
    conv.print_named(list(groups.values()))
