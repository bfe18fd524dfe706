"""Builds under faults: a killed build process, staging dirs it leaves, `cache clear` mid-build, a cache dir that
is a file. Tasks run stand-in sources (no Triton compile: `ENTRIES = []`) whose import does the fault."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tiledispatch.build import cache
from tiledispatch.build import compile as compile_mod
from tiledispatch.build.compile import CompileTask, run_task
from tiledispatch.build.pool import run_tasks
from tiledispatch.errors import CacheError

EMPTY = "ENTRIES = []\n"


def task(root: Path, name: str = "gemm-x", source: str = EMPTY, fp: str = "f" * 24) -> CompileTask:
    return CompileTask(name, "sm_90", 90, fp, source, str(root))


def staging_left(root: Path) -> list[Path]:
    folder = root / "sm_90" / cache.STAGING
    return sorted(folder.iterdir()) if folder.is_dir() else []


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- D5: a SIGKILLed build leaves no workers; D10: the next build sweeps what they left -------------------------
KILLED_BUILD = textwrap.dedent("""
    import sys
    from tiledispatch.build.compile import CompileTask
    from tiledispatch.build.pool import run_tasks

    SOURCE = "import os, time\\nopen({pids!r} + '/' + str(os.getpid()), 'w').close()\\ntime.sleep(300)\\nENTRIES = []\\n"
    if __name__ == "__main__":
        tasks = [CompileTask(f"slow{{i}}", "sm_90", 90, f"fp{{i}}", SOURCE, sys.argv[1]) for i in range(3)]
        run_tasks(tasks, 2)
""")


def test_killed_build_takes_its_workers_along_and_the_next_build_sweeps_their_staging(tmp_path):
    pids_dir, root = tmp_path / "pids", tmp_path / "cache"
    pids_dir.mkdir()
    script = tmp_path / "build_job.py"
    script.write_text(KILLED_BUILD.format(pids=str(pids_dir)))
    proc = subprocess.Popen([sys.executable, str(script), str(root)])
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.1)
            workers = [int(p.name) for p in pids_dir.iterdir()]
        assert len(workers) == 2, "both workers must be compiling when the build is killed"
        assert len(staging_left(root)) == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(pid) for pid in workers):
            time.sleep(0.1)
        assert not [pid for pid in workers if alive(pid)], "workers outlived their build by 5 s"
    finally:
        proc.kill()
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert len(staging_left(root)) == 2                      # a SIGKILLed worker cleans nothing up itself
    (result,) = run_tasks([task(root)], 1)
    assert result.ok and staging_left(root) == []           # the next build removes the dead builders' dirs


INTERRUPTED_BUILD = textwrap.dedent("""
    import signal
    import sys
    from tiledispatch.build.compile import CompileTask
    from tiledispatch.build.pool import run_tasks

    SOURCE = "import time\\nopen({marks!r} + '/' + {{name!r}}, 'w').close()\\ntime.sleep(3)\\nENTRIES = []\\n"
    if __name__ == "__main__":
        # Ctrl-C raises KeyboardInterrupt, as in a terminal, even where the test runner was started in the
        # background by a shell without job control (SIGINT ignored, and inherited as ignored).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        names = [f"slow{{i}}" for i in range(5)]
        run_tasks([CompileTask(n, "sm_90", 90, n, SOURCE.format(name=n), sys.argv[1]) for n in names], 1)
""")


def test_an_interrupted_build_does_not_start_its_queued_tasks(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "build_job.py"
    script.write_text(INTERRUPTED_BUILD.format(marks=str(marks)))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "cache")], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(marks.iterdir()):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)          # Ctrl-C of the build process alone
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0 and len(list(marks.iterdir())) <= 2, sorted(p.name for p in marks.iterdir())


# -- D10: staging dirs -----------------------------------------------------------------------------------------
def test_sweep_staging_removes_the_dirs_of_dead_builders_only(tmp_path):
    folder = tmp_path / "sm_90" / cache.STAGING
    host = socket.gethostname()
    names = {"live": f"{host}-{os.getpid()}-aaaa", "dead": f"{host}-{dead_pid()}-bbbb",
             "legacy-dead": f"{dead_pid()}-cccc", "legacy-live": f"{os.getpid()}-dddd",
             "foreign-fresh": "other-host-7-eeee", "foreign-old": "other-host-8-ffff", "trash": ".trash-0123"}
    for name in names.values():
        (folder / name).mkdir(parents=True)
        (folder / name / "kernel.py").write_text("#")
    old = time.time() - cache.FOREIGN_STALE_S - 60
    os.utime(folder / names["foreign-old"], (old, old))
    removed = {p.name for p in cache.sweep_staging(tmp_path, "sm_90")}
    assert removed == {names[k] for k in ("dead", "legacy-dead", "foreign-old", "trash")}
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        names[k] for k in ("live", "legacy-live", "foreign-fresh"))
    assert cache.sweep_staging(tmp_path / "none", "sm_90") == []


def test_staging_names_carry_host_and_pid(tmp_path):
    staging = cache.new_staging_dir(tmp_path, "sm_90")
    host, pid, _ = staging.name.rsplit("-", 2)
    assert (host, int(pid)) == (socket.gethostname(), os.getpid())


@pytest.mark.parametrize("fault", [OSError(5, "Input/output error"), KeyboardInterrupt()])
def test_a_failed_publish_or_an_interrupt_leaves_no_staging_dir(tmp_path, monkeypatch, fault):
    def broken(*args, **kwargs):
        raise fault

    target = "publish" if isinstance(fault, OSError) else "compile_entries"
    monkeypatch.setattr(cache if target == "publish" else compile_mod, target, broken)
    with pytest.raises(type(fault)):
        run_task(task(tmp_path))
    assert staging_left(tmp_path) == []


def test_a_compile_failure_leaves_no_staging_dir(tmp_path):
    result = run_task(task(tmp_path, source="undefined_name\n"))
    assert not result.ok and "NameError" in result.reason and staging_left(tmp_path) == []


# A kernel whose error is in a called @jit helper: Triton wraps the helper's CompilationError (message, line)
# in the call site's, whose text ends with a bare caret line.
BAD_HELPER = textwrap.dedent("""
    import triton
    import triton.language as tl

    @triton.jit
    def helper(x_ptr):
        offs = tl.arange(0, 3)
        tl.store(x_ptr + offs, offs)

    @triton.jit
    def kernel(x_ptr):
        helper(x_ptr)

    ENTRIES = [{"fn": "kernel", "num_warps": 4, "num_stages": 2,
                "params": [{"name": "x_ptr", "ty": "*fp32"}]}]
""")


def test_a_triton_compilation_error_keeps_the_compilers_message_and_line(tmp_path):
    result = run_task(task(tmp_path, source=BAD_HELPER))
    assert not result.ok and result.reason.startswith("CompilationError: "), result.reason
    assert "arange's range must be a power of 2" in result.reason, result.reason
    assert "helper" in result.reason and "tl.arange(0, 3)" in result.reason, result.reason
    assert "\n" not in result.reason and staging_left(tmp_path) == []


# -- D11: `cache clear` during a build ---------------------------------------------------------------------------
def test_cache_cleared_mid_compile_costs_a_retry_not_the_build(tmp_path, monkeypatch):
    real = compile_mod.compile_entries
    calls = []

    def clearing(source_path, cc, out_dir):
        calls.append(out_dir)
        if len(calls) == 1:
            cache.clear(tmp_path)            # what `tiledispatch cache clear` does, while this compile runs
        return real(source_path, cc, out_dir)

    monkeypatch.setattr(compile_mod, "compile_entries", clearing)
    result = run_task(task(tmp_path))
    assert result.ok, result.reason
    assert len(calls) == 2 and cache.read_entry(Path(result.path)) is not None
    assert staging_left(tmp_path) == []


def test_cache_cleared_every_time_is_reported_per_instance(tmp_path, monkeypatch):
    real = compile_mod.compile_entries

    def clearing(source_path, cc, out_dir):
        cache.clear(tmp_path)
        return real(source_path, cc, out_dir)

    monkeypatch.setattr(compile_mod, "compile_entries", clearing)
    result = run_task(task(tmp_path))
    assert not result.ok and "cleared" in result.reason


CLEARS_ONCE = textwrap.dedent("""
    from pathlib import Path
    from tiledispatch.build import cache
    marker = Path({marker!r})
    if not marker.exists():
        marker.write_text("cleared")
        cache.clear(Path({root!r}))
    ENTRIES = []
""")


def test_cache_clear_during_a_pool_build_is_survived(tmp_path):
    root = tmp_path / "cache"
    source = CLEARS_ONCE.format(marker=str(tmp_path / "marker"), root=str(root))
    results = run_tasks([task(root, "gemm-a", source), task(root, "gemm-b", EMPTY)], 1)
    assert all(r.ok for r in results), [r.reason for r in results]
    assert {r.name for r in results} == {"gemm-a", "gemm-b"} and staging_left(root) == []
    assert cache.read_entry(task(root, "gemm-a").entry) is not None


# -- D12: a cache dir that is a file -------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["root", "parent"])
def test_cache_dir_that_is_a_file_is_a_typed_error_naming_it(tmp_path, where):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    root = blocker if where == "root" else blocker / "cache"
    with pytest.raises(CacheError) as info:
        run_tasks([task(root)], 1)
    message = str(info.value)
    assert str(blocker) in message and "TILEDISPATCH_CACHE_DIR" in message
    assert info.value.field == "TILEDISPATCH_CACHE_DIR"
    with pytest.raises(CacheError, match="not-a-dir"):
        cache.clear(blocker)
    assert cache.cache_stats(blocker)["entries"] == 0


def test_registry_build_into_a_file_cache_dir_raises_cache_error(tmp_path):
    import tiledispatch as td
    from tiledispatch.testing import small_config

    blocker = tmp_path / "file"
    blocker.write_text("x")
    registry = td.Registry("sm_90", cache_dir=blocker)
    registry.add(small_config("tiled", "rcr", "fp16", block=(32, 32, 32)))
    with pytest.raises(CacheError, match="TILEDISPATCH_CACHE_DIR"):
        registry.build(max_workers=1)
