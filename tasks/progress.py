"""Rich progress bars for the long stages (rollout, training), shown on a terminal only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; draws a bar when stderr is a terminal, stays silent otherwise."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda n, note="": None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[note]}"), console=console,
                  transient=True) as progress:
        handle = progress.add_task(description, total=total, note="")

        def advance(n: int, note: str = "") -> None:
            progress.update(handle, advance=n, note=note)

        yield advance
