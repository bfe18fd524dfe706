"""CPU lane: sweeps end to end on Triton's interpreter (real worker processes, real kernels).

Problems are tiny fp16 GEMMs: 33x40x24 (partial tiles, K not a multiple of 16: a16 kernels run it padded),
64x64x64 (aligned), 17x9x50 (align 1). Kernels: tiled a1, tiled a16, splitk a1, and an rrr kernel that cannot run
these rcr problems (its rows are `unsupported`)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tiledispatch as td
from tiledispatch.bench.dataset import Dataset, load_frame
from tiledispatch.bench.schema import STATUSES
from tiledispatch.bench.sweep import SweepSpec, run_sweep
from tiledispatch.errors import BadInput
from tiledispatch.problems.corpus import CorpusEntry

HERE = Path(__file__).parent
SHAPES = ((33, 40, 24), (64, 64, 64), (17, 9, 50))
CONFIGS = (td.GemmConfig(dtype="fp16", block_m=32, block_n=32, block_k=32, align=1),
           td.GemmConfig(dtype="fp16", block_m=32, block_n=32, block_k=32, align=16),
           td.GemmConfig(dtype="fp16", family="splitk", block_m=32, block_n=32, block_k=32, split_k=2, align=1))
UNSUPPORTED = td.GemmConfig(dtype="fp16", layout="rrr", block_m=32, block_n=32, block_k=32, align=1)
NAMES = tuple(c.name for c in CONFIGS)


def entries(shapes=SHAPES):
    return tuple(CorpusEntry(f"unit{i}", td.GemmProblem(m, n, k, dtype="fp16")) for i, (m, n, k) in enumerate(shapes))


def spec(out, **kw):
    base = {"problems": entries(), "out": Path(out), "configs": NAMES, "cpu_workers": 2, "timeout_s": 60.0,
            "progress": False, "flush_rows": 1}
    return SweepSpec(**{**base, **kw})


def pairs(df):
    return list(zip(df["problem"], df["kernel"]))


@pytest.mark.slow
def test_sweep_records_every_pair_once_with_timings(tmp_path):
    report = run_sweep(spec(tmp_path / "d", configs=NAMES + (UNSUPPORTED.name,)))
    df = load_frame(tmp_path / "d")
    assert len(df) == 12 and len(set(pairs(df))) == 12 and report.recorded == 12 and report.measured == 9
    ok = df[df.status == "ok"]
    assert len(ok) == 9 and (ok.time_ms > 0).all() and (ok.repeats == 3).all() and (ok.rel_err < 2e-3).all()
    assert (ok.p20_ms <= ok.time_ms).all() and (ok.time_ms <= ok.p80_ms).all() and (ok.tflops > 0).all()
    assert set(df[df.kernel == UNSUPPORTED.name].status) == {"unsupported"}
    a16 = df[df.kernel == NAMES[1]]
    padded = a16[a16.p_m == 17]        # 17 x 9 x 50: no 16-byte fp16 rows, the a16 kernel runs a padded plan
    assert padded.padded.all() and padded.status.eq("ok").all() and len(padded) == 1
    direct = a16[a16.p_m == 33]        # 33 x 40 x 24: N and K multiples of 8 (16-byte rows), run as they are
    assert not direct.padded.any() and direct.status.eq("ok").all() and len(direct) == 1
    assert set(df.worker[df.status == "ok"]) <= {"cpu0", "cpu1"} and set(df.status) <= set(STATUSES)


@pytest.mark.slow
def test_schema_columns_hold_problem_and_config_fields(tmp_path):
    run_sweep(spec(tmp_path / "d", problems=entries(SHAPES[:1]), configs=NAMES[:1], cpu_workers=1))   # 1 pair
    row = load_frame(tmp_path / "d").iloc[0]
    problem = td.GemmProblem(33, 40, 24, dtype="fp16")
    assert (row.op, row.direction, row["dtype"], row.problem) == ("gemm", "none", "fp16", problem.signature())
    assert (row.p_m, row.p_n, row.p_k, row.p_layout, row.p_align) == (33, 40, 24, "rcr", 8)
    assert (row.c_block_m, row.c_family, row.c_split_k, row.kernel) == (32, "tiled", 1, NAMES[0])
    assert row.p_flops == problem.flops and row.gbps == pytest.approx(problem.min_bytes / row.time_ms / 1e6)
    for column in ("gpu", "arch", "tiledispatch", "triton", "torch", "timestamp", "sweep_id", "schema_version"):
        assert row[column] not in (None, ""), column
    assert Dataset(tmp_path / "d").manifest()["op"] == "gemm"


@pytest.mark.slow
def test_planted_crash_and_hang_cost_one_row_each(tmp_path, monkeypatch):
    monkeypatch.setenv("TD_TEST_CRASH_KERNEL", NAMES[2])
    monkeypatch.setenv("TD_TEST_HANG_KERNEL", NAMES[1])
    monkeypatch.syspath_prepend(str(HERE))
    problems = entries(SHAPES[:2])
    # each hang costs the timeout; an ok pair (3 timed runs of a 64x64x64 GEMM) takes well under 0.5 s here
    report = run_sweep(spec(tmp_path / "d", problems=problems, timeout_s=4.0, cpu_workers=1,
                            worker_setup="faults:plant"))
    df = load_frame(tmp_path / "d")
    assert len(df) == 6 and len(set(pairs(df))) == 6
    by_kernel = df.groupby("kernel").status.apply(set).to_dict()
    assert by_kernel == {NAMES[0]: {"ok"}, NAMES[1]: {"timeout"}, NAMES[2]: {"runtime_error"}}
    assert df[df.status == "runtime_error"].error.str.contains("worker died").all()
    assert report.by_status == {"ok": 2, "timeout": 2, "runtime_error": 2}


@pytest.mark.slow
def test_slow_kernel_loading_is_not_a_hang(tmp_path, monkeypatch):
    # Loading a batch's kernels (a build on a busy machine) may outlast the per-pair timeout; it is bounded
    # by the start-up allowance instead, so no pair is lost to it.
    monkeypatch.setenv("TD_TEST_SLOW_LOAD_S", "3")
    monkeypatch.syspath_prepend(str(HERE))
    run_sweep(spec(tmp_path / "d", problems=entries(SHAPES[:1]), configs=NAMES[:1], timeout_s=1.0,
                   cpu_workers=1, worker_setup="faults:plant"))
    assert list(load_frame(tmp_path / "d").status) == ["ok"]


@pytest.mark.slow
def test_resume_needs_the_flag_and_matching_kind(tmp_path):
    one = {"configs": NAMES[:1], "cpu_workers": 1}   # 1-2 pairs: one worker
    run_sweep(spec(tmp_path / "d", problems=entries(SHAPES[:1]), **one))
    with pytest.raises(BadInput, match="--resume"):
        run_sweep(spec(tmp_path / "d", problems=entries(SHAPES[:1]), **one))
    bf16 = (CorpusEntry("x", td.GemmProblem(33, 40, 24, dtype="bf16")),)
    with pytest.raises(BadInput, match="dtype"):
        run_sweep(spec(tmp_path / "d", problems=bf16, resume=True, **one))
    again = run_sweep(spec(tmp_path / "d", problems=entries(SHAPES[:2]), resume=True, **one))
    assert (again.resumed, again.measured) == (1, 1) and len(load_frame(tmp_path / "d")) == 2


KILLED_SWEEP = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, {here!r})
    from test_sweep import spec
    from tiledispatch.bench.sweep import run_sweep

    if __name__ == "__main__":
        run_sweep(spec(Path(sys.argv[1]), cpu_workers=1, resume=True))
""")


@pytest.mark.slow
def test_sweep_killed_mid_run_resumes_to_every_pair_exactly_once(tmp_path):
    script = tmp_path / "sweep_job.py"
    script.write_text(KILLED_SWEEP.format(here=str(HERE)))
    out = tmp_path / "d"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], start_new_session=True, env=os.environ.copy())
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(Dataset(out).parts()) < 3:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)   # the driver and its worker, at once, mid-run
    proc.wait()
    partial = load_frame(out)
    assert 0 < len(partial) < 9, "the kill must land mid-run"
    subprocess.run([sys.executable, str(script), str(out)], check=True, env=os.environ.copy(), timeout=600)
    df = load_frame(out)
    assert len(df) == 9 and len(set(pairs(df))) == 9 and set(df.status) == {"ok"}


def test_local_ray_sweep_on_the_interpreter(tmp_path):
    pytest.importorskip("ray")
    report = run_sweep(spec(tmp_path / "d", problems=entries(SHAPES[:2]), configs=NAMES[:2], executor="ray",
                            ray_problems_per_task=1))
    df = load_frame(tmp_path / "d")
    assert len(df) == 4 and len(set(pairs(df))) == 4 and set(df.status) == {"ok"}
    assert set(df.worker) == {"ray-cpu0", "ray-cpu1"} and report.measured == 4
