"""A progress bar for long commands (rebuild, verify, audit verify), on a terminal only."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from ..maintenance.threads import Progress

__all__ = ["Progress", "progress_bar"]


@contextmanager
def progress_bar(label: str = "threads", stream: TextIO | None = None) -> Iterator[Progress | None]:
    """A rich progress bar (count, rate, time left) on a terminal; nothing when the output is
    piped, so logs stay clean."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bar

    columns = (
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
    )
    with Bar(*columns, console=Console(file=stream)) as bar:
        task = bar.add_task(label, total=None)

        def show(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield show
