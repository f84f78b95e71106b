"""The progress bar the long CLI commands share (run, eval, convert): what, bar, done of total, a detail, elapsed."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def count_bar(console: Console, detail: str) -> Progress:
    """A bar per task of the returned Progress; `detail` is a rich format of the column after the count, e.g.
    "reward {task.fields[reward]}"."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(detail),
                    TimeElapsedColumn(), console=console)


def failed_note(share: float) -> str:
    """What the progress (rft run's bar, rft watch) shows of an explore step's failed tasks: nothing when none failed."""
    return f", {share:.0%} of tasks failed" if share else ""
