"""consumer.queues: the settings of each queue, the --queues argument, one /metrics for all."""

from __future__ import annotations

import argparse

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobq.cli.values import queue_shares
from jobq.config import load_settings
from jobq.core.errors import ConfigError
from jobq.core.job import ACK, Job
from jobq.observability.metrics import Metrics
from jobq.observability.scraping import Scrape
from jobq.wiring.derived import queue_settings


def test_each_queue_gets_its_own_settings_with_its_share() -> None:
    settings = load_settings(None, {"consumer.queues": {"mail": 4, "default": 8},
                                    "consumer.job_timeout": 9.0}, env={})
    mail, default = queue_settings(settings)
    assert (mail.queue, mail.consumer.concurrency) == ("mail", 4)
    assert (default.queue, default.consumer.concurrency) == ("default", 8)
    assert mail.consumer.job_timeout == default.consumer.job_timeout == 9.0
    assert mail.consumer.queues == {}  # each pool serves its one queue
    alone = load_settings(None, {"queue": "q", "consumer.concurrency": 3}, env={})
    assert queue_settings(alone) == [alone]


def test_a_bad_share_is_a_config_error_naming_the_key() -> None:
    for bad in ({"mail": 0}, {"a b": 1}, {"mail": "4"}):
        with pytest.raises(ConfigError, match=r"consumer\.queues") as caught:
            load_settings(None, {"consumer.queues": bad}, env={})
        assert caught.value.key == "consumer.queues"


def test_the_command_line_takes_queue_equals_share_pairs() -> None:
    assert queue_shares("mail=4, default=8") == {"mail": 4, "default": 8}
    for bad, said in (("mail", "want QUEUE=N"), ("mail=x", "want QUEUE=N"),
                      ("=3", "want QUEUE=N"), ("a=1,a=2", "named twice")):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            queue_shares(bad)


def test_one_server_shows_every_queues_series_each_family_once() -> None:
    mail, default = Metrics("postgres", "mail"), Metrics("postgres", "default")
    scrape = Scrape(mail)
    scrape.add(default)
    for metrics, count in ((mail, 2), (default, 3)):
        for n in range(count):
            metrics.settled(ACK, 0.01, None, Job(id=str(n), queue=metrics.queue, kind="k",
                                                 payload={}))
    text = generate_latest(scrape.registry).decode()
    families = list(text_string_to_metric_families(text))
    names = [family.name for family in families]
    assert len(names) == len(set(names)), names  # the text format allows each family once
    (jobs,) = [f for f in families if f.name == "jobq_jobs"]
    done = {s.labels["queue"]: s.value for s in jobs.samples
            if s.labels.get("outcome") == "ok" and s.name == "jobq_jobs_total"}
    assert done == {"mail": 2.0, "default": 3.0}


def test_health_names_the_queue_that_fails_and_ready_needs_every_queue() -> None:
    mail, default = Metrics("postgres", "mail"), Metrics("postgres", "default")
    scrape = Scrape(mail)
    scrape.add(default)
    mail.ready = True
    assert not scrape.is_ready()
    default.ready = True
    assert scrape.is_ready() and scrape.unhealthy() is None
    default.loop_stalled = lambda: 1e9  # the watchdog saw its event loop blocked long ago
    assert scrape.unhealthy() == "queue default: event loop blocked for over 30s"


def test_the_environment_gives_the_shares_as_the_command_line_does() -> None:
    settings = load_settings(None, {}, env={"JOBQ_CONSUMER__QUEUES": "mail=4,default=8"})
    assert settings.consumer.queues == {"mail": 4, "default": 8}
    with pytest.raises(ConfigError, match="want QUEUE=N"):
        load_settings(None, {}, env={"JOBQ_CONSUMER__QUEUES": "mail"})


def test_a_scrape_of_chosen_families_finds_them_in_every_queue() -> None:
    mail, default = Metrics("postgres", "mail"), Metrics("postgres", "default")
    scrape = Scrape(mail)
    scrape.add(default)
    chosen = scrape.registry.restricted_registry(["jobq_in_flight"])
    (family,) = list(chosen.collect())
    assert sorted(s.labels["queue"] for s in family.samples) == ["default", "mail"]
    with pytest.raises(RuntimeError):  # the server shows what it had when it started
        scrape.add(Metrics("postgres", "late"))
    alone = Metrics("postgres", "q")
    assert Scrape(alone).registry is alone.registry  # one queue: its own registry, as before
