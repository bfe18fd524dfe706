"""The problem corpus: sizes, determinism, validity under the caps, coverage, named suites, JSON files, and
spot checks of the model tables it is built from."""
from __future__ import annotations

import json
import math

import pytest

from tiledispatch.errors import BadInput
from tiledispatch.problems import conv_suites as cs
from tiledispatch.problems import corpus, models
from tiledispatch.problems.conv import DIRECTIONS, ConvProblem
from tiledispatch.problems.gemm import GemmProblem


@pytest.fixture(scope="module")
def gemm_default() -> list[corpus.CorpusEntry]:
    return corpus.gemm_corpus()


@pytest.fixture(scope="module")
def conv_default() -> dict[str, list[corpus.CorpusEntry]]:
    return {d: corpus.conv_corpus(d) for d in DIRECTIONS}


def _kind(p: ConvProblem) -> str:
    return "depthwise" if p.is_depthwise else ("dense" if p.groups == 1 else "grouped")


def _unique(entries: list[corpus.CorpusEntry]) -> int:
    return len({e.problem.signature() for e in entries})


# ------------------------------------------------------------------------------------------ size and caps


def test_gemm_default_size_unique_and_capped(gemm_default) -> None:
    assert len(gemm_default) >= 1000
    assert _unique(gemm_default) == len(gemm_default)
    for e in gemm_default:
        p = e.problem
        assert isinstance(p, GemmProblem) and (p.dtype, p.layout) == ("bf16", "rcr")
        assert p.flops <= corpus.GEMM_MAX_FLOPS and p.min_bytes <= corpus.GEMM_MAX_BYTES
        assert GemmProblem.from_dict(p.to_dict()) == p


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_conv_default_size_unique_and_capped(conv_default, direction: str) -> None:
    entries = conv_default[direction]
    assert len(entries) >= 1000
    assert _unique(entries) == len(entries)
    for e in entries:
        p = e.problem
        assert isinstance(p, ConvProblem) and p.direction == direction and p.dtype == "bf16"
        assert p.ndim in (2, 3)
        assert p.flops <= corpus.CONV_MAX_FLOPS and p.min_bytes <= corpus.CONV_MAX_BYTES
        assert all(o > 0 for o in p.output)
        assert ConvProblem.from_dict(p.to_dict()) == p
        if direction != "fwd":
            assert not p.bias and p.activation == "none"


def test_caps_are_parameters() -> None:
    small = corpus.gemm_corpus(max_flops=2**30, count=200)
    assert len(small) == 200 and all(e.problem.flops <= 2**30 for e in small)
    conv = corpus.conv_corpus("fwd", max_flops=2**28, max_bytes=2**24, count=150)
    assert len(conv) == 150
    assert all(e.problem.flops <= 2**28 and e.problem.min_bytes <= 2**24 for e in conv)


# ------------------------------------------------------------------------------------------ determinism


def test_deterministic_for_a_seed_and_different_across_seeds() -> None:
    assert corpus.gemm_corpus(seed=7) == corpus.gemm_corpus(seed=7)
    assert corpus.conv_corpus("bwd_data", seed=7) == corpus.conv_corpus("bwd_data", seed=7)
    for build in (corpus.gemm_corpus, lambda seed: corpus.conv_corpus("fwd", seed=seed)):
        a, b = build(seed=1), build(seed=2)
        random_a = [e.problem for e in a if e.tag == "random"]
        random_b = [e.problem for e in b if e.tag == "random"]
        assert random_a and random_a != random_b
        assert [e for e in a if e.tag != "random"] == [e for e in b if e.tag != "random"]   # models: same


def test_count_gives_exactly_that_many_seeded() -> None:
    full = corpus.gemm_corpus()
    subset = corpus.gemm_corpus(count=100, seed=3)
    assert len(subset) == 100 and subset == corpus.gemm_corpus(count=100, seed=3)
    assert {e.problem for e in subset} <= {e.problem for e in corpus.gemm_corpus(seed=3)}
    bigger = corpus.conv_corpus("fwd", count=2500)
    assert len(bigger) == 2500 and _unique(bigger) == 2500
    assert len(full) > 100
    with pytest.raises(BadInput) as err:
        corpus.gemm_corpus(count=0)
    assert err.value.field == "count"


def test_model_part_comes_first_in_a_stable_order(gemm_default, conv_default) -> None:
    for entries in (gemm_default, conv_default["fwd"]):
        tags = [e.tag for e in entries]
        first_random = tags.index("random")
        assert all(t == "random" for t in tags[first_random:])
        assert "random" not in tags[:first_random]
    assert gemm_default[0].tag == "llama3_8b.qkv@m1"
    assert conv_default["fwd"][0].tag == "resnet50/conv1@n1"


# ------------------------------------------------------------------------------------------ coverage


def test_gemm_covers_odd_sizes_llm_and_token_counts(gemm_default) -> None:
    problems = [e.problem for e in gemm_default]
    odd = [p for p in problems if any(x % 8 for x in (p.n, p.k))]
    assert len(odd) >= 100 and any(p.align == 1 for p in problems)
    llama = {e.problem.m for e in gemm_default if e.tag.startswith("llama3_8b.qkv@")}
    assert llama == {m for m in corpus.GEMM_M_VALUES if 2 * m * 6144 * 4096 <= corpus.GEMM_MAX_FLOPS}
    assert max(e.problem.m for e in gemm_default if e.tag.startswith("gpt2.")) == 16384
    prefixes = corpus.breakdown(gemm_default)
    assert {"llama3_70b", "qwen2_5_7b", "mixtral_8x7b", "gpt2", "bert_large", "phi3_mini", "square",
            "small_k", "random"} <= set(prefixes)
    assert any(e.problem.k <= 64 and e.tag == "small_k" for e in gemm_default)


@pytest.mark.parametrize("part", ["models", "random"])
def test_conv_covers_kinds_and_dims(conv_default, part: str) -> None:
    entries = [e for e in conv_default["fwd"] if (e.tag == "random") == (part == "random")]
    seen = {(e.problem.ndim, _kind(e.problem)) for e in entries}
    assert seen == {(nd, kind) for nd in (2, 3) for kind in ("dense", "grouped", "depthwise")}
    problems = [e.problem for e in entries]
    assert sum(p.c % 8 != 0 or p.k % 8 != 0 for p in problems) >= 20
    assert any(p.stride != (1,) * p.ndim for p in problems)
    assert any(p.filter[0] >= 5 and p.is_depthwise and p.stride[-1] == 2 for p in problems)
    if part == "random":
        assert any(left != right for p in problems for left, right in p.padding)
        assert any(max(p.dilation) > 1 for p in problems)
        assert 1 < len({p.c_per_group for p in problems if _kind(p) == "grouped"}) <= 64


def test_conv_batches_and_tags(conv_default) -> None:
    tags = {e.tag for e in conv_default["fwd"]}
    assert {"resnet50/layer1.0.conv2@n32", "r2plus1d_18/stem.spatial@n1", "convnext_tiny/stage1.dwconv@n8",
            "efficientnet_b0/features.3.0.dw@n64"} <= tags
    batches = {e.problem.n for e in conv_default["fwd"] if e.tag.startswith("resnet50/")}
    assert batches == set(corpus.CONV_BATCHES[2])


def test_conv_ndims_selects_dims() -> None:
    one_d = corpus.conv_corpus("fwd", ndims=(1,))
    assert {e.problem.ndim for e in one_d} == {1}
    assert {"wav2vec2_encoder", "conformer_conv", "mamba_conv", "random"} <= set(corpus.breakdown(one_d))
    assert {e.problem.ndim for e in corpus.conv_corpus("bwd_weight", ndims=(3,), count=300)} == {3}
    with pytest.raises(BadInput) as err:
        corpus.conv_corpus("fwd", ndims=(4,))
    assert err.value.field == "ndims"


# ------------------------------------------------------------------------------------------ named suites


def test_named_suites() -> None:
    assert set(corpus.SUITE_NAMES) >= {"gemm", "conv_fwd", "conv_bwd_data", "conv_bwd_weight", "resnet50",
                                       "resnext50_32x4d", "mobilenet_v2", "video3d", "smoke_gemm",
                                       "smoke_conv_fwd", "smoke_conv_bwd_data", "smoke_conv_bwd_weight"}
    resnet = corpus.named_suite("resnet50", direction="bwd_weight")
    assert len(resnet) == len(cs.suite("resnet50"))
    assert all(e.problem.direction == "bwd_weight" and e.tag.startswith("resnet50/") for e in resnet)
    named = corpus.named_suite("conv_bwd_data", count=50, seed=2)
    assert named == corpus.conv_corpus("bwd_data", count=50, seed=2)
    assert corpus.named_suite("gemm", dtype="fp16", count=20)[0].problem.dtype == "fp16"
    with pytest.raises(BadInput) as err:
        corpus.named_suite("resnet51")
    assert err.value.field == "suite" and "smoke_gemm" in str(err.value)
    with pytest.raises(BadInput) as err:
        corpus.named_suite("conv_fwd", layout="rcr")
    assert err.value.field == "layout"


SMOKE = ["smoke_gemm", "smoke_conv_fwd", "smoke_conv_bwd_data", "smoke_conv_bwd_weight"]


@pytest.mark.parametrize("name", SMOKE)
def test_smoke_suites_are_tiny_and_odd(name: str) -> None:
    entries = corpus.named_suite(name)
    assert 4 <= len(entries) <= 8 and _unique(entries) == len(entries)
    for e in entries:
        p = e.problem
        sizes = (p.m, p.n, p.k) if isinstance(p, GemmProblem) else (p.n, p.c, p.k, *p.spatial)
        assert max(sizes) <= 64
    if name == "smoke_gemm":
        assert any(e.problem.align == 1 for e in entries)
    else:
        assert any(e.problem.c % 8 for e in entries) and {e.problem.ndim for e in entries} == {1, 2, 3}


# ------------------------------------------------------------------------------------------ files


@pytest.mark.parametrize("name", ["gemm", "conv_bwd_data"])
def test_save_load_round_trip(tmp_path, name: str) -> None:
    entries = corpus.named_suite(name, count=120, seed=5)
    path = tmp_path / "set.json"
    corpus.save_problems(path, entries, {"suite": name, "seed": 5})
    loaded, meta = corpus.load_problems(path)
    assert loaded == entries and meta == {"suite": name, "seed": 5}
    doc = json.loads(path.read_text())
    assert (doc["format"], doc["kind"], doc["op"]) == (1, "tiledispatch-problems", corpus.suite_op(name))


def _write(tmp_path, doc) -> str:
    path = tmp_path / "bad.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def _good_doc() -> dict:
    entries = corpus.smoke_conv("fwd")
    return {"format": 1, "kind": "tiledispatch-problems", "op": "conv", "meta": {},
            "problems": [{"tag": e.tag, "problem": e.problem.to_dict()} for e in entries]}


def _edit(path: tuple, value) -> dict:
    doc = _good_doc()
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(("doc", "field"), [
    ("{not json", "file"),
    ([1, 2], "file"),
    (_edit(("format",), 2), "format"),
    (_edit(("kind",), "something-else"), "kind"),
    (_edit(("op",), "matmul"), "op"),
    (_edit(("meta",), [1]), "meta"),
    (_edit(("problems",), {"a": 1}), "problems"),
    (_edit(("problems", 1, "tag"), KeyError), "problems[1]"),
    (_edit(("problems", 0, "tag"), 3), "problems[0].tag"),
    (_edit(("problems", 2, "problem", "wide"), 1), "problems[2].problem.wide"),
    (_edit(("problems", 2, "problem", "groups"), KeyError), "problems[2].problem.groups"),
    (_edit(("problems", 3, "problem", "groups"), 3), "problems[3].problem.groups"),
    (_edit(("problems", 0, "problem", "dtype"), "fp64"), "problems[0].problem.dtype"),
])
def test_bad_files_are_refused_by_field(tmp_path, doc, field: str) -> None:
    with pytest.raises(BadInput) as err:
        corpus.load_problems(_write(tmp_path, doc))
    assert err.value.field == field, str(err.value)


def test_gemm_file_checks_epilogue_fields(tmp_path) -> None:
    path = tmp_path / "g.json"
    corpus.save_problems(path, corpus.smoke_gemm(), {})
    doc = json.loads(path.read_text())
    doc["problems"][1]["problem"]["epilogue"]["fancy"] = True
    with pytest.raises(BadInput) as err:
        corpus.load_problems(_write(tmp_path, doc))
    assert err.value.field == "problems[1].problem.epilogue.fancy"


def test_save_refuses_mixed_ops_and_empty_sets(tmp_path) -> None:
    with pytest.raises(BadInput) as err:
        corpus.save_problems(tmp_path / "m.json", corpus.smoke_gemm() + corpus.smoke_conv("fwd"), {})
    assert err.value.field == "op"
    with pytest.raises(BadInput) as err:
        corpus.save_problems(tmp_path / "e.json", [], {})
    assert err.value.field == "problems"
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------ model tables


def test_every_model_layer_is_a_valid_problem() -> None:
    for model, layers in models.CONV_MODELS.items():
        table = layers()
        assert table and len({layer.name for layer in table}) == len(table), model
        for layer in table:
            p = cs.problem_of(layer, 1)
            assert all(o > 0 for o in p.output), (model, layer.name)


def test_known_model_layers() -> None:
    r21d = models.r2plus1d_18_layers()
    assert {x.k for x in r21d if x.name.endswith("spatial")} == {45, 144, 230, 288, 460, 576, 921, 1152}
    assert all(x.filter in ((1, 3, 3), (3, 1, 1), (1, 7, 7), (1, 1, 1)) for x in r21d)
    final = next(x for x in r21d if x.name == "layer4.1.conv2.temporal")
    assert final.spatial == (2, 7, 7)
    wav = {x.name: cs.problem_of(x, 1) for x in models.wav2vec2_encoder_layers()}
    assert wav["conv6"].output == (49,) and wav["conv0"].c == 1 and wav["pos_conv"].groups == 16
    conformer = {x.name: x for x in models.conformer_conv_layers()}
    assert conformer["m.depthwise"].filter == (31,) and conformer["m.depthwise"].groups == 256
    eff = {(x.filter, x.stride) for x in models.efficientnet_b0_layers() if x.groups == x.c > 1}
    assert {((3, 3), (2, 2)), ((5, 5), (2, 2)), ((5, 5), (1, 1))} <= eff
    mnv3 = {x.c for x in models.mobilenet_v3_large_layers() if x.groups > 1}
    assert {72, 184, 200, 960} <= mnv3
    convnext = {x.name: x for x in models.convnext_tiny_layers()}
    assert convnext["stage4.dwconv"].filter == (7, 7) and convnext["stem"].stride == (4, 4)
    csn = [x for x in models.ir_csn_101_layers() if x.groups > 1]
    assert csn and all(x.groups == x.c == x.k and x.filter == (3, 3, 3) for x in csn)
    regnety = {x.groups for x in models.regnety_1_6gf_layers() if x.groups > 1}
    assert regnety == {2, 5, 14, 37}
    assert {x.c // x.groups for x in models.resnext101_32x8d_layers() if x.groups > 1} == {8, 16, 32, 64}


def test_llm_tables() -> None:
    llama = dict(models.LLM_PROJECTIONS["llama3_8b"])
    assert llama == {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                     "lm_head": (128256, 4096)}
    assert dict(models.LLM_PROJECTIONS["qwen2_5_7b"])["qkv"] == (4608, 3584)
    assert dict(models.LLM_PROJECTIONS["llama3_70b"])["down"] == (8192, 28672)
    assert dict(models.LLM_PROJECTIONS["gpt2"])["fc1"] == (3072, 768)
    assert dict(models.LLM_PROJECTIONS["mixtral_8x7b"])["router"] == (8, 4096)
    assert all(n > 0 and k > 0 and math.log2(n * k) < 36 for table in models.LLM_PROJECTIONS.values()
               for _, (n, k) in table)
