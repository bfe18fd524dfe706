"""tools/zoo_vendor_share.py: per key, the counts of problems where the vendor beats our best plan (by 1.25x,
1.5x) or ours beats it by 1.25x, and the geomean; a later file's key replaces an earlier one's."""
from __future__ import annotations

import gzip
import json
import math

import pytest


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/zoo_vendor_share.py")


def write(path, key, effs):
    rows = [{"problem": f"p{i}", "eff_vendor": str(e)} for i, e in enumerate(effs)] + [{"eff_vendor": "None"}]
    path.write_bytes(gzip.compress(json.dumps({"results": {key: {"rows": rows}}}).encode()))
    return path


def test_counts_and_geomean(tool, tmp_path):
    row = tool.shares(write(tmp_path / "a.json.gz", "k", [2.0, 1.3, 1.1, 0.9, 0.5]))["k"]
    counts = [row[name] for name in ("problems", "vendor_faster", "vendor_1.25x", "vendor_1.5x", "ours_1.25x")]
    assert counts == [5, 3, 2, 1, 1]
    assert row["geomean_vendor_over_ours"] == pytest.approx(math.prod([2.0, 1.3, 1.1, 0.9, 0.5]) ** 0.2)


def test_the_last_file_wins_per_key(tool, tmp_path, monkeypatch, capsys):
    old, new = write(tmp_path / "old.json.gz", "k", [2.0]), write(tmp_path / "new.json.gz", "k", [0.5, 0.5])
    out = tmp_path / "out.json"
    monkeypatch.setattr("sys.argv", ["zoo_vendor_share.py", str(old), str(new), "--json", str(out)])
    tool.main()
    assert json.loads(out.read_text())["k"]["problems"] == 2 and "k " in capsys.readouterr().out
