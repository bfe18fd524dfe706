"""A stand-in for the compile worker pool (build.pool.run_tasks) in tests of what gets built and when: it
records every compile task it is handed and answers each with a success (an entry path under `root` that
nothing loads) or the failure it was told to report; `error` makes it raise instead, as an unusable cache or a
broken pool does. Selection tests use it to count builds without compiling; a kernel it "built" cannot run."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tiledispatch.build.compile import CompileResult, CompileTask


class StubBuilds:
    """Call it as run_tasks (monkeypatch build.pool.run_tasks with it)."""

    def __init__(self, root: str | Path, fail: dict[str, str] | None = None,
                 error: BaseException | None = None) -> None:
        self.root = Path(root)
        self.fail = dict(fail or {})
        self.error = error
        self.batches: list[list[str]] = []   # the kernel names of each call, in task order

    @property
    def names(self) -> list[str]:
        """Every kernel name handed to the pool so far."""
        return [name for batch in self.batches for name in batch]

    def __call__(self, tasks: Sequence[CompileTask], max_workers: int,
                 on_done: Callable[[CompileResult], None] | None = None,
                 keep: bool = False) -> list[CompileResult]:
        if self.error is not None:
            raise self.error
        if not tasks:
            return []
        self.batches.append([task.name for task in tasks])
        results = []
        for task in tasks:
            if task.name in self.fail:
                result = CompileResult(task.name, False, 0.01, self.fail[task.name])
            else:
                result = CompileResult(task.name, True, 0.01, path=str(self.root / task.name))
            results.append(result)
            if on_done is not None:
                on_done(result)
        return results


def install(monkeypatch: Any, builds: StubBuilds) -> StubBuilds:
    """Route every registry build of the test through `builds` (pytest's monkeypatch undoes it)."""
    import tiledispatch.build.pool as pool

    monkeypatch.setattr(pool, "run_tasks", builds)
    return builds
