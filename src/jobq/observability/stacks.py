"""Every asyncio task's and every thread's stack, logged on a signal (SIGUSR1) while running.

For a consumer that looks stuck: ``kill -USR1 <pid>`` logs where each task awaits and where
each thread is, without stopping anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any


def awaiting(task: asyncio.Task[object]) -> list[FrameType]:
    """The frames of ``task`` from its coroutine down to the innermost await.

    ``Task.get_stack`` stops at the task's own coroutine; what it awaits (a coroutine awaiting
    a coroutine, an async generator) is followed through ``cr_await`` here.
    """
    frames: list[FrameType] = []
    current: Any = task.get_coro()
    while current is not None:
        frame = (getattr(current, "cr_frame", None) or getattr(current, "gi_frame", None)
                 or getattr(current, "ag_frame", None))
        if frame is None:
            break
        frames.append(frame)
        current = (getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
                   or getattr(current, "ag_await", None))
    return frames or task.get_stack()


def render_stacks(loop: asyncio.AbstractEventLoop) -> str:
    """The stack of every task of ``loop`` and of every thread, as text."""
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
    out.write(f"{len(tasks)} asyncio tasks:\n")
    for task in tasks:
        out.write(f"--- task {task.get_name()} ({task.get_coro()!r})\n")
        out.write("".join(traceback.format_list(traceback.StackSummary.extract(
            (f, f.f_lineno) for f in awaiting(task)))) or "  (no stack)\n")
    names = {t.ident: t.name for t in threading.enumerate()}
    frames_by_thread = sys._current_frames()
    out.write(f"{len(frames_by_thread)} threads:\n")
    for ident, frame in frames_by_thread.items():
        out.write(f"--- thread {names.get(ident, '?')} ({ident})\n")
        out.write("".join(traceback.format_stack(frame)))
    return out.getvalue()


@contextlib.contextmanager
def stacks_on_signal(log: logging.Logger, sig: signal.Signals = signal.SIGUSR1) -> Iterator[None]:
    """While inside, ``sig`` logs every task's and thread's stack; the old handler after."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(sig)

    def dump() -> None:
        log.warning("stacks on %s:\n%s", sig.name, render_stacks(loop))

    loop.add_signal_handler(sig, dump)
    try:
        yield
    finally:
        loop.remove_signal_handler(sig)
        if previous is not None:  # None: set outside Python, nothing to put back
            signal.signal(sig, previous)
