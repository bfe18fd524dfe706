"""Progress bars for long work (rich), shown on a terminal unless TILEDISPATCH_PROGRESS says otherwise."""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tiledispatch import settings


@contextmanager
def progress_bar(description: str, total: int, enabled: bool | None = None) -> Iterator[Callable[..., None]]:
    """A context yielding advance(n=1); shows count, rate, elapsed time and ETA."""
    forced = settings.progress_enabled()
    show = enabled if enabled is not None else (forced if forced is not None else sys.stderr.isatty())
    if not show or total == 0:
        yield lambda n=1: None
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


def _rate_column():
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        """Items per second (rich's moving estimate)."""

        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f}/s" if task.speed else "-/s", style="progress.data.speed")

    return Rate()
