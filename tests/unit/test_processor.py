"""Processor loading and the built-ins."""

from __future__ import annotations

import pytest

from jobq import Job, PermanentError, Retry
from jobq.core.errors import ConfigError
from jobq.worker.processor import as_async, load_processor

JOB = Job(id="7", queue="q", kind="k", payload={})


async def test_builtins_behave_as_named() -> None:
    await as_async(load_processor("noop"))(JOB)
    await as_async(load_processor("sleep", {"ms": 1, "jitter": 1}))(JOB)
    await as_async(load_processor("cpu", {"rounds": 10}))(JOB)
    with pytest.raises(Retry):
        await as_async(load_processor("flaky", {"rate": 1.0}))(JOB)
    await as_async(load_processor("flaky", {"rate": 0.0}))(JOB)
    with pytest.raises(PermanentError):
        await as_async(load_processor("fail"))(JOB)


def test_module_function_loads_and_factories_take_args() -> None:
    assert callable(load_processor("tests.processors:completions"))
    assert callable(load_processor("tests.processors:record", {"directory": "/tmp/jobq-test"}))


@pytest.mark.parametrize(
    ("spec", "args", "words"),
    [
        ("nope", None, "unknown processor"),
        ("sleep", {"seconds": 1}, "bad arguments"),
        ("no.such.module:fn", None, "cannot load"),
        ("tests.processors:absent", None, "cannot load"),
    ],
)
def test_bad_processor_is_a_config_error(spec: str, args: dict[str, int] | None, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_processor(spec, args)
