"""The pool's one lifecycle state: how a stop, a second stop, a pause and run()'s end move it."""

from __future__ import annotations

from jobq.worker.lifecycle import Lifecycle, State


async def test_a_run_drains_at_a_stop_and_is_stopped_at_its_end() -> None:
    life = Lifecycle()
    assert life.state is State.STARTING and not life.stopped
    life.start()
    assert life.state is State.RUNNING and not life.holds_back
    assert life.stop() is False  # the first stop drains
    assert life.state is State.DRAINING and life.stopped and life.holds_back and not life.left
    life.close()
    assert life.state is State.STOPPED and life.left and not life.forced


async def test_a_second_stop_forces_and_stays_forced() -> None:
    life = Lifecycle()
    life.start()
    life.drain()  # the fetcher ran out of work (--once): a stop after that is a second one
    assert life.state is State.DRAINING
    assert life.stop() is True and life.forced and life.forcing.is_set()
    life.close()
    assert life.state is State.FORCED and life.left


async def test_a_pause_is_a_state_while_running_and_outlives_a_stop() -> None:
    life = Lifecycle()
    life.pause_changed(True)  # seen before run() (look_at_pause)
    assert life.state is State.STARTING and life.paused
    life.start()
    assert life.state is State.PAUSED and life.holds_back
    life.stop()
    assert life.state is State.DRAINING and life.paused  # what the watch said still stands
    life.pause_changed(False)
    assert life.state is State.DRAINING and not life.paused


async def test_a_stop_before_run_stands() -> None:
    life = Lifecycle()
    life.stop()
    life.start()
    assert life.state is State.DRAINING and life.stopped


async def test_a_cancelled_run_is_stopped_without_a_stop_asked() -> None:
    life = Lifecycle()
    life.start()
    life.close()  # run() itself was cancelled: no stop was asked
    assert life.state is State.STOPPED and life.left and not life.stopped
    assert life.stop() is False  # so this is the first stop
    assert life.state is State.STOPPED and life.stopped
