"""tools/cv_new_data.py: the same folds fitted with and without a corpus's problems; the 'without' side never
trains on them, both sides score the same held-out problems."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "ml" / "data" / "conv_fwd_bf16_sample"


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/cv_new_data.py")


def test_without_side_never_sees_the_new_problems(tool, tmp_path, monkeypatch):
    pytest.importorskip("lightgbm")
    from tiledispatch.bench.dataset import Dataset
    from tiledispatch.ml import train

    frame = train.kernel_rows(Dataset(SAMPLE).frame())
    tags = sorted(frame["tag"].unique())[:12]
    new = set(frame.loc[frame["tag"].isin(tags), "problem"])
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({"problems": [{"tag": t} for t in tags]}))
    monkeypatch.setattr(train, "MAX_ROUNDS", 20)
    monkeypatch.setattr(train, "ROUND_GRID", (10, 20))
    fitted: list[set[str]] = []
    real_fit = train.fit

    def recording_fit(kind, data, rounds, threads):
        fitted.append(set(data.problems))
        return real_fit(kind, data, rounds, threads)

    monkeypatch.setattr(train, "fit", recording_fit)
    out = tmp_path / "report.json"
    monkeypatch.setattr(sys, "argv", ["cv_new_data.py", str(SAMPLE), "--new", str(corpus),
                                      "--holdout", "0.05", "--out", str(out)])
    tool.main()
    report = json.loads(out.read_text())
    folds = len(fitted) // 2
    assert folds >= 2 and len(fitted) == 2 * folds
    assert any(s & new for s in fitted[:folds])            # 'with' fits on some of the new problems
    assert all(not (s & new) for s in fitted[folds:])      # 'without' never does
    assert report["new_problems"] == len(new)
    with_new, without = report["with_new"], report["without_new"]
    assert with_new["old"]["problems"] == without["old"]["problems"] > 0
    assert with_new["new"]["problems"] == without["new"]["problems"] > 0
    for side in (with_new, without):
        assert side["rounds"] in (10, 20) and 0 < side["old"]["worst"] <= side["old"]["mean"] <= 1
    assert report["old_pick_speedup_geomean"] > 0


def test_a_corpus_that_matches_nothing_is_refused(tool, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({"problems": [{"tag": "no/such@n1"}]}))
    monkeypatch.setattr(sys, "argv", ["cv_new_data.py", str(SAMPLE), "--new", str(corpus)])
    with pytest.raises(SystemExit, match="carries a tag"):
        tool.main()
