"""jobq.sync.SyncPublisher: synchronous code enqueues on either backend, from many threads at
once and from inside a running event loop, and every job it said it enqueued is there."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from jobq import NewJob, SyncPublisher
from jobq.config import load_settings
from tests.conftest import ROOT
from tests.contract.backends import Backend, backend_under_test


@pytest.fixture(params=["postgres-lease", "rabbitmq-quorum"])
def backend(request: pytest.FixtureRequest, queue_name: str) -> Iterator[Backend]:
    with backend_under_test(request, queue_name, request.param) as backend:
        yield backend


def test_threads_and_a_running_loop_enqueue_through_one_publisher(backend: Backend) -> None:
    settings = load_settings(ROOT / "configs" / f"{backend.transport}.yaml",
                             {"queue": backend.queue}, env=backend.env)
    with SyncPublisher(settings) as publisher:
        def five(thread: int) -> list[str]:
            return [publisher.enqueue(NewJob(kind="sync", payload={"t": thread, "i": i}))
                    for i in range(5)]

        with ThreadPoolExecutor(4) as threads:
            ids = [job_id for batch in threads.map(five, range(4)) for job_id in batch]
        ids += publisher.enqueue_many([NewJob(kind="sync", payload={"i": i}) for i in range(10)])

        async def inside_a_loop() -> str:  # never the caller's loop: no deadlock
            return publisher.enqueue(NewJob(kind="sync", payload={"loop": True}))

        ids.append(asyncio.run(inside_a_loop()))
    assert len(set(ids)) == 31, ids
    done = backend.run("consumer", "--once", "-p", "noop")  # every one there, no other
    assert done.returncode == 0 and "ok=31" in done.stderr, done.stderr


def test_a_closed_publisher_says_so_and_closing_twice_is_harmless(backend: Backend) -> None:
    settings = load_settings(ROOT / "configs" / f"{backend.transport}.yaml",
                             {"queue": backend.queue}, env=backend.env)
    publisher = SyncPublisher(settings).open()
    publisher.close()
    publisher.close()
    with pytest.raises(RuntimeError, match="not open"):
        publisher.enqueue(NewJob(kind="sync", payload={}))


def test_a_publisher_opened_before_a_fork_is_refused_in_the_child(backend: Backend) -> None:
    """Its loop thread does not survive a fork (gunicorn --preload): the child is told to open
    its own instead of waiting out every call's deadline."""
    settings = load_settings(ROOT / "configs" / f"{backend.transport}.yaml",
                             {"queue": backend.queue}, env=backend.env)
    with SyncPublisher(settings) as publisher:
        child = os.fork()
        if child == 0:  # the child: exit 0 only if refused, naming the cause
            try:
                publisher.enqueue(NewJob(kind="sync", payload={}))
                os._exit(1)
            except RuntimeError as exc:
                os._exit(0 if "opened in another process" in str(exc) else 2)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert publisher.enqueue(NewJob(kind="sync", payload={}))  # the parent's still works
