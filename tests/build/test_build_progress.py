"""Progress outside a terminal: a first-use build says when it starts and what it did (TILEDISPATCH_PROGRESS
unset), and stays silent when the variable or the caller turns progress off."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.codegen import render_source
from tiledispatch.progress import progress_bar
from tiledispatch.testing import small_config


def test_progress_outside_a_terminal_is_a_start_and_an_end_line(capsys, monkeypatch):
    monkeypatch.delenv("TILEDISPATCH_PROGRESS", raising=False)
    with progress_bar("building 3 kernels for sm_90", 3) as advance:
        assert capsys.readouterr().err == "building 3 kernels for sm_90 ...\n"
        for _ in range(3):
            advance()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("building 3 kernels for sm_90: 3 of 3 done in ")


def test_an_interrupted_run_still_ends_its_line(capsys, monkeypatch):
    monkeypatch.delenv("TILEDISPATCH_PROGRESS", raising=False)
    with pytest.raises(KeyboardInterrupt), progress_bar("work", 4) as advance:
        advance()
        raise KeyboardInterrupt
    assert "work: 1 of 4 done in " in capsys.readouterr().err


@pytest.mark.parametrize("off", ["env", "argument"])
def test_progress_turned_off_is_silent(capsys, monkeypatch, off):
    monkeypatch.setenv("TILEDISPATCH_PROGRESS", "0" if off == "env" else "1")
    with progress_bar("work", 2, enabled=False if off == "argument" else None) as advance:
        advance()
    assert capsys.readouterr().err == ""


def test_a_cold_build_outside_a_terminal_logs_its_start_and_end(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TILEDISPATCH_PROGRESS", raising=False)
    cfg = small_config("tiled", "rcr", "fp16", block=(16, 32, 32))
    registry = td.Registry("sm_90", cache_dir=tmp_path)
    registry.add(cfg, source=render_source(cfg) + "\nundefined_name_at_import\n")   # fails fast, no compile
    report = registry.build(max_workers=1)
    assert list(report.failed) == [cfg.name]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].endswith(" ...") and "1 of 1 done" in lines[1]
    registry.build(max_workers=1, progress=False)
    assert capsys.readouterr().err == ""
