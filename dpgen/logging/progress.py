"""The progress bar of the training loop and of a method's PUBLIC pre-training (e.g. DPSWflow's autoencoder).

Transient when it times private steps: its clock is never left in a log (the timings depend on the private
batch sizes)."""

from __future__ import annotations

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def progress_bar(name: str, *, enabled: bool = True, transient: bool = False) -> Progress:
    """A rich progress bar ``name completed/total [bar] info elapsed remaining``; ``enabled=False`` draws nothing."""
    return Progress(TextColumn(f"[bold]{name}[/] " + "{task.completed}/{task.total}"), BarColumn(),
                    TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    disable=not enabled, transient=transient)
