"""Progress of long work: a bar (rich) on a terminal, a line at the start and at the end elsewhere (a
first-use build in a script or a job log is not silent), nothing when TILEDISPATCH_PROGRESS=0 or
enabled=False."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tiledispatch import settings


@contextmanager
def progress_bar(description: str, total: int, enabled: bool | None = None) -> Iterator[Callable[..., None]]:
    """A context yielding advance(n=1). On a terminal (or when forced on) a bar shows count, rate, elapsed
    time and ETA; elsewhere a line at the start and at the end (with the count done); forced off, nothing."""
    forced = enabled if enabled is not None else settings.progress_enabled()
    if total == 0 or forced is False:
        yield lambda n=1: None
        return
    if forced is None and not sys.stderr.isatty():
        with _log_lines(description, total) as advance:
            yield advance
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _rate_column(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


@contextmanager
def _log_lines(description: str, total: int) -> Iterator[Callable[..., None]]:
    """`description ...` now, `description: done n of total in s` at the end (also when interrupted)."""
    done, start = [0], time.perf_counter()
    _line(f"{description} ...")

    def advance(n: int = 1) -> None:
        done[0] += n

    try:
        yield advance
    finally:
        _line(f"{description}: {done[0]} of {total} done in {time.perf_counter() - start:.1f} s")


def _line(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _rate_column():
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        """Items per second (rich's moving estimate)."""

        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f}/s" if task.speed else "-/s", style="progress.data.speed")

    return Rate()
