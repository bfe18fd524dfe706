"""A dataset with a damaged part (truncated after it was written): every reader reports it once by name and goes
on with the readable parts; writers (resume, compact, drop) move it to DIR/corrupt/; `--resume` measures its
pairs again."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_sweep import NAMES, entries, pairs, spec
from typer.testing import CliRunner

from tiledispatch.bench.dataset import CORRUPT, Dataset, load_frame
from tiledispatch.bench.schema import Outcome, make_row
from tiledispatch.bench.sweep import run_sweep
from tiledispatch.cli.main import app
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.gemm import GemmProblem

A = GemmConfig(dtype="bf16", block_m=64, block_n=64)
B = GemmConfig(dtype="bf16", family="splitk", split_k=4)
Q1, Q2 = GemmProblem(256, 256, 256, dtype="bf16"), GemmProblem(128, 128, 128, dtype="bf16")
STAMP = {"gpu": "NVIDIA H200", "arch": "sm_90", "triton": "3.6.0", "timestamp": "2025-03-04T05:06:07"}


def truncate(part: Path) -> None:
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])


@pytest.fixture
def damaged(tmp_path):
    """Two parts of two rows each; the second is cut in half. Returns (dataset dir, damaged part)."""
    dataset = Dataset(tmp_path / "d")
    dataset.open("gemm", "none", "bf16", STAMP["gpu"], resume=False, extra={})
    dataset.append([make_row(Q1, "t", c.name, c, Outcome("ok", time_ms=t), STAMP) for c, t in ((A, .2), (B, .6))])
    part = dataset.append([make_row(Q2, "t", c.name, c, Outcome("ok", time_ms=t), STAMP)
                           for c, t in ((A, .1), (B, .15))])
    truncate(part)
    return dataset.path, part


def test_readers_skip_a_damaged_part_and_name_it_once(damaged):
    path, part = damaged
    said: list[str] = []
    dataset = Dataset(path, said.append)
    assert len(dataset.frame()) == 2 and len(dataset.frame(["problem", "kernel"])) == 2
    assert dataset.done_pairs() == {(Q1.signature(), A.name), (Q1.signature(), B.name)}
    assert len(said) == 1 and str(part) in said[0] and "skipped" in said[0]
    assert dataset.corrupt == [part] and part.exists()              # readers move nothing
    assert len(load_frame(path, said.append)) == 2 and len(said) == 2


def _cli(*args):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    return runner.invoke(app, [str(a) for a in args])


def test_data_summary_reports_the_part_and_summarizes_the_rest(damaged):
    path, part = damaged
    result = _cli("data", "summary", path, "--json")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    data = json.loads(result.stdout)
    assert (data["rows"], data["problems"], data["kernels"]) == (2, 1, 2)
    assert result.stderr.count(part.name) == 1 and "damaged" in result.stderr
    assert "error" not in result.stderr
    assert _cli("data", "oracle", path).exit_code == 0


def test_compact_and_drop_move_the_damaged_part_aside(damaged):
    path, part = damaged
    result = _cli("data", "compact", path)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert part.name in result.stderr and (path / CORRUPT / part.name).exists() and not part.exists()
    assert len(Dataset(path).parts()) == 1 and len(load_frame(path)) == 2
    truncate(Dataset(path).parts()[0])
    result = _cli("data", "drop", path, "--kernel", A.name)
    assert result.exit_code == 0 and "dropped 0 row(s)" in result.stdout
    assert len(list((path / CORRUPT).iterdir())) == 2 and Dataset(path).parts() == []


def test_resume_remeasures_the_pairs_of_a_damaged_part(tmp_path):
    out = tmp_path / "d"
    one = {"problems": entries()[:2], "configs": NAMES[:1], "cpu_workers": 1}   # 2 pairs: one worker
    run_sweep(spec(out, **one))    # flush_rows=1: one part per row
    parts = Dataset(out).parts()
    assert len(parts) == 2
    truncate(parts[0])
    said: list[str] = []
    report = run_sweep(spec(out, resume=True, **one), said.append)
    assert (report.resumed, report.measured) == (1, 1) and report.damaged_parts == [str(parts[0])]
    assert sum(parts[0].name in line for line in said) == 1
    assert (out / CORRUPT / parts[0].name).exists()
    df = load_frame(out)
    assert len(df) == 2 and len(set(pairs(df))) == 2 and set(df.status) == {"ok"}
