"""Progress bars for long work (rich), shown on a terminal unless TILEDISPATCH_PROGRESS says otherwise."""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tiledispatch import settings


@contextmanager
def progress_bar(description: str, total: int, enabled: bool | None = None) -> Iterator[Callable[[], None]]:
    forced = settings.progress_enabled()
    show = enabled if enabled is not None else (forced if forced is not None else sys.stderr.isatty())
    if not show or total == 0:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)
