"""A one-line progress bar on stderr (a line per step when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """``[#####.....] 7/24  0:42 elapsed, ~1:10 left  drain x2 postgres-lease``."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 24) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.monotonic()
        self.tty = self.stream.isatty()

    def step(self, label: str) -> None:
        """Show that ``label`` is starting."""
        self._show(label)

    def finish_step(self, note: str = "") -> None:
        """Count the current step as done; ``note`` is printed on non-terminals."""
        self.done += 1
        if not self.tty and note:
            print(f"    {note}", file=self.stream, flush=True)

    def close(self) -> None:
        """End the bar's line."""
        self._show("done")
        if self.tty:
            print(file=self.stream, flush=True)

    def _show(self, label: str) -> None:
        elapsed = time.monotonic() - self.started
        filled = round(self.width * self.done / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        eta = f", ~{_clock(left)} left" if self.done and self.done < self.total else ""
        line = f"[{bar}] {self.done}/{self.total}  {_clock(elapsed)} elapsed{eta}  {label}"
        if self.tty:
            print("\r\x1b[2K" + line[:160], end="", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)
