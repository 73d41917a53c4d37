"""What a build shows while it runs: log lines, and one progress bar per entry with the
TUs running now and a line per finished TU (cached, or its time and peak memory)."""

from __future__ import annotations

import contextlib

from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from flashbuild.core.console import console
from flashbuild.compile.jobs import SchedulerEvents


def _note(result) -> str:
    """A TUResult's line ending: cached, or what compiling it cost."""
    if result.cached:
        return "cached"
    if result.peak_rss_kb:
        return f"{result.wall_s:.0f} s, peak {result.peak_rss_kb / 1024 / 1024:.2f} GiB"
    return ""


@contextlib.contextmanager
def compile_progress(entry_name: str, total: int):
    """SchedulerEvents that drive the display of one entry's compile stage."""
    running: set[str] = set()
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(entry_name, total=total)

        def describe() -> str:
            return f"{entry_name} | running {len(running)}: {', '.join(sorted(running)) or '-'}"

        def started(job):
            running.add(job.name)
            progress.update(task, description=describe())

        def finished(outcome):
            running.discard(outcome.job.name)
            if hasattr(outcome.result, "cached"):  # a TUResult, not a runner's exception
                progress.console.print(f"  {'ok' if outcome.ok else 'FAILED':6} {outcome.job.name} "
                                       f"{_note(outcome.result)}")
            progress.update(task, advance=1, description=describe())

        def retried(outcome, again):
            running.discard(outcome.job.name)
            peak = (getattr(outcome.result, "peak_rss_kb", None) or 0) / 1024 / 1024
            progress.console.print(f"  {'KILLED':6} {outcome.job.name} for memory at {peak:.2f} GiB; compiling it "
                                   f"again alone (estimate {again.estimate_bytes / 1024**3:.2f} GiB)")
            progress.update(task, description=describe())

        yield SchedulerEvents(started=started, finished=finished, retried=retried)
