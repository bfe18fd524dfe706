"""tools/train_corpus_dw.py (it imports train_corpus by name): the synthetic corpus is seeded, holds
align-2 / align-4 depthwise and grouped layers only, and leaves out a layer the zoo holds (at any batch) or
a training problem."""
from __future__ import annotations

import dataclasses
import random
import sys

import pytest


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/train_corpus_dw.py")


def zoo_of(problems):
    return {"conv": {d: [{"problem": dataclasses.replace(p, direction=d).to_dict()} for p in problems]
                     for d in ("fwd", "bwd_data", "bwd_weight")}}


def test_seeded_and_of_the_asked_kind(tool, monkeypatch, load_script):
    monkeypatch.setitem(sys.modules, "train_corpus", load_script("tools/train_corpus.py"))
    empty = {d: set() for d in ("fwd", "bwd_data", "bwd_weight")}
    a, _ = tool.corpus(40, 3, zoo_of([]), empty)
    b, _ = tool.corpus(40, 3, zoo_of([]), empty)
    assert [i["problem"] for i in a] == [i["problem"] for i in b] and len(a) == 40
    for item in a:
        p = item["problem"]
        assert p.align in (2, 4) and p.groups > 1 and p.c // p.groups <= 8


def test_zoo_layers_and_training_problems_are_left_out(tool, monkeypatch, load_script):
    monkeypatch.setitem(sys.modules, "train_corpus", load_script("tools/train_corpus.py"))
    rng = random.Random(3)
    first, second = tool.candidate(rng)["problem"], tool.candidate(rng)["problem"]
    other_batch = dataclasses.replace(first, n=first.n * 2 + 1)      # the same layer at another batch
    training = {d: set() for d in ("fwd", "bwd_data", "bwd_weight")}
    training["bwd_weight"].add(dataclasses.replace(second, direction="bwd_weight").signature())
    kept, drops = tool.corpus(40, 3, zoo_of([other_batch]), training)
    sigs = {i["problem"].signature() for i in kept}
    assert first.signature() not in sigs and second.signature() not in sigs and drops["excluded"] >= 2
