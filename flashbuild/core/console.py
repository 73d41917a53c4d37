"""The driver's one console (rich) and its log line. A leaf: the memory model notes through it
without importing what shows a build's progress (progress.py)."""

from __future__ import annotations

from rich.console import Console

console = Console(highlight=False, soft_wrap=True)


def log(message: str) -> None:
    console.print(f"[bold cyan]flashbuild[/] {message}")
