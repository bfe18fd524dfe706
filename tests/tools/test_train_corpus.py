"""tools/train_corpus.py: real 2-D conv layers for training that keep clear of the unseen zoo. The exclusion
of zoo / training models and signatures, dedup, the round-robin cap and determinism on synthetic layers (no
timm); the committed benchmarks/zoo/train_real2d_<direction>.json files against the zoo; one timm model end
to end where timm is installed (in a subprocess: the tool may stand a torchvision stub in)."""
from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiledispatch.problems import conv_suites as cs
from tiledispatch.problems import corpus
from tiledispatch.problems.conv import ConvProblem

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "benchmarks" / "zoo" / "unseen_zoo.json"
TRAIN = ROOT / "benchmarks" / "zoo" / "train_real2d.json"
# the committed batches: the first (swept into data/h200 in stop 47) and a second one (seed 1, generated in
# stop 48 with the first already in data/h200, so disjoint from it)
BATCHES = (TRAIN, TRAIN.with_name("train_real2d_b.json"))
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/train_corpus.py")


# ------------------------------------------------------------------------------------------------ models


def test_candidates_leave_out_zoo_training_and_test_models(tool):
    excluded = tool.excluded_keys(["efficientnet_b3", "regnet_x_3_2gf"], ["resnet50"])
    by_module = {"efficientnet": ["efficientnet_b3", "tf_efficientnet_b3", "efficientnet_b4",
                                  "efficientnet_b5"],
                 "regnet": ["regnetx_032", "regnetx_040"], "resnet": ["resnet50", "resnet50d", "test_resnet"]}
    names, drops = tool.pick_candidates(by_module, excluded, 5, seed=0)
    assert names == ["efficientnet_b4", "efficientnet_b5", "regnetx_040", "resnet50d"]
    assert drops == {"zoo": 3, "training": 1, "test_model": 1}    # regnetx_032: torchvision's regnet_x_3_2gf
    one = [tool.pick_candidates(by_module, excluded, 1, seed=s)[0] for s in range(8)]
    assert all(len(n) == 3 for n in one) and len({tuple(n) for n in one}) > 1
    assert one[3] == tool.pick_candidates(by_module, excluded, 1, seed=3)[0]


def test_explicit_models_are_checked(tool):
    excluded = tool.excluded_keys(["ghostnet_100"], ["mobilenet_v2"])
    with pytest.raises(SystemExit, match="ghostnet_100"):
        tool.check_allowed(["resnet10t", "ghostnet_100"], excluded)
    with pytest.raises(SystemExit, match="mobilenetv2"):
        tool.check_allowed(["mobilenetv2"], excluded)
    tool.check_allowed(["resnet10t"], excluded)


# ------------------------------------------------------------------------------------------------ layers


def _record(layer: str, c: int, k: int, side: int = 16, **over: Any) -> dict[str, Any]:
    return {"layer": layer, "op": "Conv2d", "class": "torch.nn.modules.conv.Conv2d",
            "input_shape": [1, c, side, side], "in_channels": c, "out_channels": k, "kernel_size": [3, 3],
            "stride": [1, 1], "padding": [1, 1], "padding_mode": "zeros", "dilation": [1, 1], "groups": 1,
            **over}


def _model(name: str, channels: list[int]) -> dict[str, Any]:
    layers = [_record(f"conv{i}", 8, k) for i, k in enumerate(channels)]
    return {"model": name, "source": "timm", "input_shape": [1, 3, 16, 16], "layers": layers}


def _problem(k: int, n: int, direction: str = "fwd", c: int = 8) -> ConvProblem:
    fwd = ConvProblem("fwd", n, c, k, 1, (16, 16), (3, 3), stride=1, padding=1, dtype="bf16")
    return cs.with_direction(fwd, direction)


def _zoo(*problems: ConvProblem) -> dict[str, Any]:
    return {"conv": {d: [{"problem": cs.with_direction(p, d).to_dict()} for p in problems]
                     for d in DIRECTIONS}}


def _no_training() -> dict[str, set[str]]:
    return {d: set() for d in DIRECTIONS}


def test_exclusion_of_zoo_and_training_problems(tool):
    a = _model("a", list(range(16, 26)))                 # 10 layers x 4 batches
    zoo = _zoo(_problem(16, 8))                          # layer conv0, met by the zoo at batch 8
    training = _no_training()
    training["bwd_weight"].add(_problem(17, 32, "bwd_weight").signature())
    items, found = tool.corpus_items([a], zoo, training, per_direction=1000, seed=0)
    kept = {(i["layer"], i["batch"]) for i in items}
    assert not any(layer == "conv0" for layer, _ in kept)              # every batch of the zoo's layer
    assert ("conv1", 32) not in kept and ("conv1", 8) in kept          # in training in one direction only
    assert len(items) == 40 - 4 - 1
    layers = found["layers"]
    assert layers["zoo_signature"] == dict.fromkeys(DIRECTIONS, 1) and layers["zoo_layer_other_batch"] == 3
    assert layers["training_signature"] == {"fwd": 0, "bwd_data": 0, "bwd_weight": 1}
    assert layers["any"] == 5 and found["sampled_out"] == 0


def test_dedup_and_conv_models_only(tool):
    shared = list(range(16, 26))
    a, b = _model("a", shared), _model("b", shared[:5] + list(range(40, 45)))
    small = _model("small", [16, 17, 60])                 # fewer than MIN_CONVS distinct convs
    linear = {"layer": "fc", "op": "Linear", "class": "torch.nn.modules.linear.Linear"}
    a["layers"].append(linear)
    items, found = tool.corpus_items([a, b, small], _zoo(), _no_training(), per_direction=1000, seed=0)
    problems = [i["problem"] for i in items]
    assert len(problems) == len(set(problems)) == 4 * 15
    assert {i["model"] for i in items} == {"a", "b"} and found["not_conv"] == {"small": 3}
    assert found["layers"]["duplicate"] == 4 * 5 and found["layers"]["not_conv"] == {"Linear": 1}


def test_round_robin_cap_keeps_every_model(tool):
    models = [_model("a", list(range(16, 40))), _model("b", list(range(50, 58))),
              _model("c", list(range(60, 68)))]
    items, found = tool.corpus_items(models, _zoo(), _no_training(), per_direction=9, seed=0)
    assert len(items) == 9 and {i["model"] for i in items} == {"a", "b", "c"}
    assert found["sampled_out"] == 4 * (24 + 8 + 8) - 9
    again, _ = tool.corpus_items(models, _zoo(), _no_training(), per_direction=9, seed=0)
    other, _ = tool.corpus_items(models, _zoo(), _no_training(), per_direction=9, seed=1)
    assert again == items and other != items


def test_written_files_are_deterministic_problem_files(tool, tmp_path):
    items, _ = tool.corpus_items([_model("a", list(range(16, 26)))], _zoo(), _no_training(), 7, 0)
    meta = {"models": {"used": {"a": 7}}}
    first = tool.write(tmp_path / "one" / "x.json", DIRECTIONS, items, meta)
    second = tool.write(tmp_path / "two" / "x.json", DIRECTIONS, items, meta)
    assert [p.name for p in first.values()] == ["x_fwd.json", "x_bwd_data.json", "x_bwd_weight.json"]
    tags = []
    for direction in DIRECTIONS:
        assert first[direction].read_bytes() == second[direction].read_bytes()
        entries, got = corpus.load_problems(first[direction])
        assert got == {**meta, "direction": direction}
        assert {e.problem.direction for e in entries} == {direction} and len(entries) == 7
        tags.append([e.tag for e in entries])
    assert tags[0] == tags[1] == tags[2] and tags[0][0].startswith("a/conv")


# ------------------------------------------------------------------------------------------ committed files


@functools.cache
def zoo_file() -> dict[str, Any]:
    """The unseen zoo's corpus (also read by test_train_corpus3d)."""
    return json.loads(ZOO.read_text())


@functools.cache
def committed(direction: str, batch: Path) -> tuple[list[corpus.CorpusEntry], dict[str, Any]]:
    """The committed corpus file of `batch` (a corpus stem) for `direction` (also read by
    test_train_corpus3d)."""
    return corpus.load_problems(batch.with_name(f"{batch.stem}_{direction}.json"))


@pytest.mark.parametrize("batch", BATCHES, ids=lambda p: p.stem)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_committed_corpus_has_no_zoo_problem(tool, direction, batch):
    entries, meta = committed(direction, batch)
    problems = [e.problem for e in entries]
    assert len(problems) == meta["per_direction"] and meta["direction"] == direction
    assert all(p.direction == direction and p.dtype == "bf16" and p.ndim == 2 for p in problems)
    sigs = {p.signature() for p in problems}
    assert len(sigs) == len(problems)
    zoo = zoo_file()["conv"][direction]
    leaked = sigs & {ConvProblem.from_dict(e["problem"]).signature() for e in zoo}
    assert not leaked, f"{len(leaked)} problems are zoo problems, e.g. {sorted(leaked)[:3]}"
    zoo_layers = {tool.layer_key(ConvProblem.from_dict(e["problem"])) for e in zoo}
    assert not {tool.layer_key(p) for p in problems} & zoo_layers
    # Disjoint from data/h200 only when generated: the corpus was swept into those datasets (stop 47), so
    # the exclusion of training problems is tested on the generator (test_exclusion_of_zoo_and_training_...).


@pytest.mark.parametrize("batch", BATCHES, ids=lambda p: p.stem)
def test_committed_corpus_shares_no_model_with_the_zoo(tool, batch):
    zoo = zoo_file()["models"]
    tags = [[e.tag for e in committed(d, batch)[0]] for d in DIRECTIONS]
    assert tags[0] == tags[1] == tags[2]
    _, meta = committed("fwd", batch)
    models = {tag.split("/")[0] for tag in tags[0]}
    assert models == set(meta["models"]["used"]) and len(models) >= 100
    assert sum(meta["models"]["used"].values()) == len(tags[0])
    excluded = tool.excluded_keys(zoo["zoo"], [*zoo["training_tables"], *tool.zoo_tool().training_models()])
    key = tool.zoo_tool().model_key
    assert not {m for m in models if key(m) in excluded}
    assert set(meta["models"]["zoo"]) == set(zoo["zoo"]) and meta["versions"]["timm"]
    assert batch.with_name(f"{batch.stem}_fwd.json").stat().st_size < 1_000_000


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_committed_batches_share_no_layer(direction):
    """The second batch adds layers: no signature and no (model, layer) of the first one."""
    first, second = (committed(direction, batch)[0] for batch in BATCHES)
    assert not {e.problem.signature() for e in first} & {e.problem.signature() for e in second}
    layers = [{tuple(e.tag.split("/")[:2]) for e in entries} for entries in (first, second)]  # model, layer
    assert not layers[0] & layers[1]


# ---------------------------------------------------------------------------------------------------- timm


def test_one_timm_model_end_to_end(tmp_path):
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed (pip install --no-deps timm)")
    out = tmp_path / "t.json"
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "train_corpus.py"), "--models", "resnet10t",
                          "--per-direction", "12", "--directions", "fwd", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    entries, meta = corpus.load_problems(tmp_path / "t_fwd.json")
    assert len(entries) == 12 and meta["models"]["used"] == {"resnet10t": 12}
    assert meta["models"]["candidates"] == ["resnet10t"] and meta["versions"]["timm"]
    assert not (tmp_path / "t_bwd_data.json").exists()
