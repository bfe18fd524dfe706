"""tools/overhead_ab.py: runs the benchmark on two trees in alternation, each with its own PYTHONPATH, and
judges after - before of the judged variants (here with a stand-in benchmark: no tiledispatch run)."""
from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Writes what benchmarks/dispatch_overhead.py writes, from the tiledispatch its PYTHONPATH holds: that
# package's DELAY (µs) is added to every time; every run is appended to order.log next to --out.
FAKE_BENCHMARK = '''
import json, os, sys
from pathlib import Path
import tiledispatch
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
out = Path(args["--out"])
with open(out.parent / "order.log", "a") as log:
    log.write(args["--label"] + "\\n")
d = tiledispatch.DELAY
us = lambda base: {"direct": base, "td_gemm": base + 4 + d}
row = lambda rid, base: {"id": rid, "kernel": tiledispatch.KERNEL, "per_call_us": us(base),
                         "issue_us": us(base),
                         "unavailable": {} if d else {"registry_run": "TypeError: run() takes 3 arguments"}}
conv = {"id": "conv fwd", "td_conv_kernel": "conv-a", "per_call_us": {"td_api": 20 + d, "torch": 15.0},
        "issue_us": {"td_api": 6 + d, "torch": 5.0}}
out.write_text(json.dumps({
    "mode": "gpu", "gpu": "NVIDIA H200", "host_cpu": "cpu", "torch": "2.11", "triton": "3.6", "protocol": "p",
    "judged": {"gemm": "td_gemm", "conv": "td_api"},
    "code": {"package": os.environ.get("FAKE_PACKAGE") or str(Path(tiledispatch.__file__).resolve().parent),
             "sources_sha256": str(d),
             "git_rev": None, "git_tracked": False, "git_dirty": None},
    "rows": [row("gemm 64x64x64", 10.0)], "conv_rows": [conv]}))
'''


def load():
    spec = importlib.util.spec_from_file_location("overhead_ab", ROOT / "tools" / "overhead_ab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree(path: Path, delay: float, kernel: str = "gemm-a") -> Path:
    (path / "src" / "tiledispatch").mkdir(parents=True)
    (path / "src" / "tiledispatch" / "__init__.py").write_text(f"DELAY = {delay}\nKERNEL = {kernel!r}\n")
    return path


@pytest.fixture
def ab(tmp_path, monkeypatch):
    module = load()
    fake = tmp_path / "fake_benchmark.py"
    fake.write_text(textwrap.dedent(FAKE_BENCHMARK))
    monkeypatch.setattr(module, "BENCHMARK", fake)
    return module


def test_sides_alternate_and_a_small_slowdown_passes(ab, tmp_path):
    before, after, out = tree(tmp_path / "old", 0.0), tree(tmp_path / "new", 0.4), tmp_path / "ab"
    assert ab.main(["--before", str(before), "--after", str(after / "src"), "--out", str(out),
                    "--cache-root", str(tmp_path / "cache"), "--trials", "3"]) == 0
    assert (out / "order.log").read_text().split() == ["before", "after", "before", "after"]
    data = json.loads((out / "dispatch_overhead_ab.json").read_text())
    assert data["pass"] and data["same_kernels"] and not data["same_code"]
    assert data["sides"]["before"]["code"]["package"] == str(before / "src" / "tiledispatch")
    assert data["benchmark_args"] == ["--trials", "3"]
    judged = {(r["row"], r["variant"]): r for r in data["rows"] if r["judged"]}
    assert set(judged) == {("gemm 64x64x64", "td_gemm"), ("conv fwd", "td_api")}
    gemm = judged[("gemm 64x64x64", "td_gemm")]
    assert gemm["before_per_call_us"] == 14.0 and gemm["delta_issue_us"] == pytest.approx(0.4)
    assert gemm["runs_per_call_us"]["after"] == [14.4, 14.4]
    torch_row = next(r for r in data["rows"] if r["variant"] == "torch")
    assert torch_row["pass"] is None and torch_row["delta_per_call_us"] == 0.0
    text = (out / "dispatch_overhead_ab.md").read_text()
    assert "| gemm 64x64x64 | td_gemm | 14.00 | 14.40 | +0.40 |" in text


def test_a_slowdown_over_the_limit_and_another_kernel_fail(ab, tmp_path):
    before, after = tree(tmp_path / "old", 0.0), tree(tmp_path / "new", 0.6, kernel="gemm-b")
    out = tmp_path / "ab"
    assert ab.main(["--before", str(before), "--after", str(after), "--out", str(out), "--rounds", "1",
                    "--shared-cache"]) == 1
    data = json.loads((out / "dispatch_overhead_ab.json").read_text())
    assert not data["pass"] and not data["same_kernels"]
    assert [r["pass"] for r in data["rows"] if r["judged"]] == [False, False]
    text = (out / "dispatch_overhead_ab.md").read_text()
    assert "DIFFER: gemm 64x64x64 kernel: gemm-a -> gemm-b" in text
    assert data["left_out"] == [{"side": "before", "row": "gemm 64x64x64", "variant": "registry_run",
                                 "why": "TypeError: run() takes 3 arguments"}]
    assert "Left out (before): gemm 64x64x64 registry_run: TypeError: run() takes 3 arguments" in text


def test_a_run_that_measured_another_tree_stops_the_comparison(ab, tmp_path, monkeypatch):
    before, after = tree(tmp_path / "old", 0.0), tree(tmp_path / "new", 0.0)
    monkeypatch.setenv("FAKE_PACKAGE", str(after / "src" / "tiledispatch"))   # as if PYTHONPATH did not take
    with pytest.raises(SystemExit) as exc:
        ab.main(["--before", str(before), "--after", str(after), "--out", str(tmp_path / "ab"),
                 "--shared-cache"])
    assert exc.value.code == 2 and not (tmp_path / "ab" / "dispatch_overhead_ab.json").exists()


def test_a_tree_without_the_package_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="is a package"):
        load().source_dir(str(tmp_path))
