"""The unseen zoo of issue 36 (benchmarks/zoo/unseen_zoo.json, written by tools/zoo_corpus.py): every entry
is a valid problem, the counts meet the issue's minima, and no problem is one the training corpus holds
(the test that fails if the zoo leaks training problems); and the tool's layer conversion on synthetic
records."""
from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

import pytest

import tiledispatch as td
from tiledispatch.problems import conv_suites as cs
from tiledispatch.problems import corpus
from tiledispatch.problems.models import CONV_MODELS, LLM_PROJECTIONS

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "benchmarks" / "zoo" / "unseen_zoo.json"
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
MIN_MODELS, MIN_PER_DIRECTION, MIN_GEMMS = 40, 300, 300


@pytest.fixture(scope="module")
def zoo() -> dict[str, Any]:
    return json.loads(ZOO.read_text())


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/zoo_corpus.py")


@functools.cache
def training(direction: str) -> frozenset[str]:
    """What the sweeps trained on (tools/gpu_sweeps.sh: the named corpus, --count 1100, seed 0), the whole
    default corpus it is a subset of, and the conv benchmark suites at their default batches."""
    if direction == "gemm":
        entries = corpus.named_suite("gemm", dtype="bf16", count=1100) + corpus.gemm_corpus("bf16")
        return frozenset(e.problem.signature() for e in entries)
    entries = corpus.named_suite(f"conv_{direction}", dtype="bf16", count=1100)
    entries += corpus.conv_corpus(direction)
    sigs = {e.problem.signature() for e in entries}
    for name in cs.SUITES + cs.HARD_SUITES:
        sigs |= {case.for_direction(direction).signature() for case in cs.suite(name)}
    return frozenset(sigs)


def test_header(zoo):
    assert zoo["kind"] == "tiledispatch-unseen-zoo" and zoo["generator"] == "tools/zoo_corpus.py"
    assert zoo["versions"]["timm"] and zoo["versions"]["torchvision"]
    assert set(zoo["exclusions"]) == {"conv", "gemm"} and zoo["models"]["failed"] == []


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_conv_entries_are_valid_unseen_problems(zoo, direction):
    entries = zoo["conv"][direction]
    assert len(entries) >= MIN_PER_DIRECTION
    problems = [td.ConvProblem.from_dict(e["problem"]) for e in entries]
    assert all(p.direction == direction and p.dtype == "bf16" for p in problems)
    assert [json.loads(json.dumps(p.to_dict())) for p in problems] == [e["problem"] for e in entries]
    sigs = [p.signature() for p in problems]
    assert len(set(sigs)) == len(sigs)
    leaked = sorted(set(sigs) & training(direction))
    assert not leaked, f"{len(leaked)} zoo problems are training problems, e.g. {leaked[:3]}"
    assert {p.ndim for p in problems} == {2, 3}
    assert all(e["batch"] == p.n for e, p in zip(entries, problems))


def test_directions_hold_the_same_layers(zoo):
    keys = [[(e["model"], e["layer"], e["batch"]) for e in zoo["conv"][d]] for d in DIRECTIONS]
    assert keys[0] == keys[1] == keys[2]


def test_conv_models_are_unseen(zoo):
    models = {e["model"] for e in zoo["conv"]["fwd"]}
    assert len(models) >= MIN_MODELS
    assert models <= set(zoo["models"]["zoo"])
    training_models = set(CONV_MODELS) | {c.model for n in cs.SUITES + cs.HARD_SUITES for c in cs.suite(n)}
    assert not models & training_models
    assert not models & set(zoo["models"]["training_tables"])


def test_gemm_entries_are_valid_unseen_problems(zoo):
    entries = zoo["gemm"]
    assert len(entries) >= MIN_GEMMS
    problems = [td.GemmProblem.from_dict(e["problem"]) for e in entries]
    assert [json.loads(json.dumps(p.to_dict())) for p in problems] == [e["problem"] for e in entries]
    sigs = [p.signature() for p in problems]
    assert len(set(sigs)) == len(sigs)
    leaked = sorted(set(sigs) & training("gemm"))
    assert not leaked, f"{len(leaked)} zoo GEMMs are training problems, e.g. {leaked[:3]}"
    assert not {e["model"] for e in entries} & set(LLM_PROJECTIONS)
    assert all(e["tokens"] == p.m for e, p in zip(entries, problems))


def _record(**over: Any) -> dict[str, Any]:
    record = {"op": "Conv2d", "class": "torch.nn.modules.conv.Conv2d", "input_shape": [1, 8, 15, 15],
              "in_channels": 8, "out_channels": 16, "kernel_size": [3, 3], "stride": [2, 2],
              "padding": [1, 1], "padding_mode": "zeros", "dilation": [1, 1], "groups": 1}
    return record | over


def test_layer_problem_paddings(tool):
    assert tool.layer_problem(_record())[0]["padding"] == [(1, 1), (1, 1)]
    # timm's Conv2dSame: TensorFlow SAME, the odd pixel on the right (15 -> 8 outputs of stride 2 need 2)
    same = _record(**{"class": "timm.layers.conv2d_same.Conv2dSame", "own_forward": True, "padding": [0, 0],
                      "input_shape": [1, 8, 16, 16]})
    assert tool.layer_problem(same)[0]["padding"] == [(0, 1), (0, 1)]
    assert tool.layer_problem(_record(padding="same", kernel_size=[4, 4], stride=[1, 1]))[0]["padding"] == \
        [(1, 2), (1, 2)]
    reflect = tool.layer_problem(_record(padding_mode="reflect"))[0]
    assert reflect["spatial"] == [17, 17] and reflect["padding"] == [(0, 0), (0, 0)]
    assert tool.layer_problem(_record(op="Linear")) == (None, "Linear")
    assert tool.layer_problem(_record(**{"class": "x.CondConv2d", "own_forward": True}))[0] is None


def test_round_robin_keeps_every_model(tool):
    items = [{"model": m, "i": i} for m, n in (("a", 50), ("b", 2), ("c", 9)) for i in range(n)]
    kept = tool.round_robin(items, 12, random.Random(0))
    assert len(kept) == 12 and {k["model"] for k in kept} == {"a", "b", "c"}
    assert sum(k["model"] == "b" for k in kept) == 2
    assert kept == [i for i in items if i in kept]     # original order


def test_check_unseen_refuses_a_training_model(tool):
    with pytest.raises(SystemExit, match="resnet50"):
        tool.check_unseen([tool.ZooModel("timm", "resnet50")])
    tool.check_unseen(tool.ZOO_MODELS)


def test_rank_space_takes_zoo_slices(load_script):
    """benchmarks/rank_space.py --zoo: consecutive --start slices cover a key's zoo problems once each, and
    --summarize pools the rows of a key's slices."""
    import argparse

    rank_space = load_script("benchmarks/rank_space.py")
    args = argparse.Namespace(zoo=ZOO, dtype="bf16", seed=0, ops="conv", directions=["bwd_data"], ndims=[3],
                              count=100, start=0)
    seen = []
    while groups := rank_space.zoo_groups(args):
        (key, problems), = groups.items()
        assert key == f"conv_bwd_data_bf16_3d@zoo{args.start}-{args.start + len(problems)}"
        seen += problems
        args.start += args.count
    zoo = [td.ConvProblem.from_dict(e["problem"]) for e in json.loads(ZOO.read_text())["conv"]["bwd_data"]]
    assert sorted(p.signature() for p in seen) == sorted(p.signature() for p in zoo if p.ndim == 3)
    row = {"cold": True, "select_s": 1.0, "from_space": True, "warm_select_us": 5.0, "eff_space": 0.5,
           "eff_rules": 1.0}
    data = {"results": {"k@zoo0-1": {"rows": [row]}, "k@zoo1-2": {"rows": [row | {"eff_space": 1.0}]}}}
    pooled = rank_space.pooled(data)
    assert list(pooled) == ["k"] and pooled["k"]["problems"] == 2
    assert pooled["k"]["efficiency"]["space"] == {"mean": 0.75, "median": 0.75, "p10": 0.5, "worst": 0.5}


def test_rank_space_interleaves_keys_and_saves_partial_slices(load_script, tmp_path):
    """A run cut short by --deadline-s has measured every key in proportion to its size, and each save
    replaces the slice's earlier partial entry (no stale `@zoo0-<n>` keys pile up)."""
    rank_space = load_script("benchmarks/rank_space.py")
    order = rank_space.interleaved({"a": list(range(4)), "b": list(range(2))})
    assert sorted(order) == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)]
    assert [key for key, _ in order[:3]].count("b") == 1
    out = tmp_path / "r.json"
    row = {"cold": False, "from_space": None, "best_ms": 1.0, "eff_space": 1.0}
    rows = {"k@zoo0-9": [row]}
    rank_space.save(out, rows, "gpu")
    rows["k@zoo0-9"].append(row | {"eff_space": 0.5})
    rows["k@zoo0-9"].append({"cold": True})                      # a cold pick not measured yet
    rank_space.save(out, rows, "gpu")
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["k@zoo0-2"]
    assert results["k@zoo0-2"]["summary"]["efficiency"]["space"]["mean"] == 0.75
