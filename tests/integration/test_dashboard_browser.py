"""The dashboard in a real browser: Debian's headless Chromium, driven by Selenium through its
chromedriver, on each backend: open the page, find the queue, see a dead job and its error
(its ``<script>`` payload shown as text, never run), log in, requeue it, see it done; and the
overview listing every queue it finds on both backends (RabbitMQ's through the management API,
on a node of the test's own with the plugin: the machine's broker has none), pausing a found one.

The screenshots go to the test's directory, and to $JOBQ_SCREENSHOTS when it is set (the
README's and docs/dashboard.md's come from ``JOBQ_SCREENSHOTS=docs/img pytest ...``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import pytest
from psycopg import sql
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from faults.cluster.nodes import RabbitCluster
from tests.conftest import PG_DSN, fetch, jobs_table, need_tool, schema_env, wait_until
from tests.contract.backends import Backend, publish_raw
from tests.integration.test_dashboard import SCRIPT, TOKEN, Dashboard


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    binary = need_tool("chromium", "chromium")
    driver_path = need_tool("chromedriver", "chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: WebDriver, directory: Path, name: str) -> None:
    path = directory / f"dashboard-{name}.png"
    driver.save_screenshot(str(path))
    if os.environ.get("JOBQ_SCREENSHOTS"):
        target = Path(os.environ["JOBQ_SCREENSHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["postgres", "rabbitmq"])
def test_find_a_dead_job_see_its_error_requeue_it_see_it_done(
        transport: str, browser: WebDriver, schema: str, queue_name: str, amqp_url: str,
        tmp_path: Path) -> None:
    env = schema_env(schema, JOBQ_DASHBOARD__TOKEN=TOKEN)
    pg = Backend("postgres", queue_name, dict(env), schema=schema)
    rabbit = Backend("rabbitmq", queue_name, dict(env))
    assert rabbit.run("jobq", "init").returncode == 0
    if transport == "postgres":
        pg.produce(3, "--kind", "report")
        fetch(PG_DSN, sql.SQL(
            "INSERT INTO {} (queue, kind, payload, status, attempts, last_error, finished_at) "
            "VALUES (%s, 'mail', %s, 'dead', 5, 'SMTPError: 550 no such user', now()) "
            "RETURNING id").format(jobs_table(schema)), [queue_name, json.dumps({"html": SCRIPT})])
        backend, n = pg, 0
    else:
        asyncio.run(publish_raw(queue_name, json.dumps({"html": SCRIPT}).encode(),
                                message_id="mail-42", kind="mail"))
        assert rabbit.run("consumer", "--once", "-p", "fail", "--max-attempts", "1").returncode == 0
        backend, n = rabbit, 1
    dashboard = Dashboard(queue_name, env)
    base = f"http://127.0.0.1:{dashboard.port}"
    try:
        browser.get(base + "/")
        shot(browser, tmp_path, "queues")
        links = browser.find_elements(By.LINK_TEXT, queue_name)
        assert len(links) == 2, browser.page_source[:2000]
        links[n].click()
        WebDriverWait(browser, 20).until(expected_conditions.url_contains(f"/queues/{n}"))
        browser.find_element(By.LINK_TEXT, "dead").click()
        row = WebDriverWait(browser, 20).until(expected_conditions.presence_of_element_located(
            (By.XPATH, "//td[text()='mail']/..")))
        assert ("SMTPError: 550 no such user" if transport == "postgres"
                else "PermanentError: this job always fails") in row.text, row.text
        shot(browser, tmp_path, f"queue-{transport}")
        row.find_element(By.TAG_NAME, "a").click()
        payload = WebDriverWait(browser, 20).until(expected_conditions.presence_of_element_located(
            (By.CSS_SELECTOR, "pre.payload"))).text
        assert SCRIPT in payload  # shown as text ...
        assert browser.execute_script("return document.querySelectorAll('pre script').length") == 0
        job_url = browser.current_url
        shot(browser, tmp_path, f"job-{transport}")

        browser.get(base + "/login")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.TAG_NAME, "form").submit()
        WebDriverWait(browser, 20).until(expected_conditions.url_to_be(base + "/"))  # logged in
        browser.get(job_url)
        browser.find_element(By.XPATH, "//button[text()='retry now']").click()
        banner = WebDriverWait(browser, 20).until(  # the POST, its redirect, the page
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".banner")))
        assert "requeued" in banner.text, banner.text
        assert backend.run("consumer", "--once", "-p", "noop").returncode == 0
        if transport == "postgres":
            browser.get(job_url)
            state = browser.find_element(By.XPATH, "//th[text()='state']/../td").text
            assert state == "done", state
        else:  # RabbitMQ keeps nothing of a done job: the dead list is empty now
            browser.get(f"{base}/queues/{n}?state=dead")
            assert browser.find_element(By.XPATH, "//td[text()='none']")
        shot(browser, tmp_path, f"done-{transport}")
    finally:
        dashboard.stop()
        rabbit.cleanup()


API_PORT = 15796  # the management API of the test's own node (AMQP on 5796)


@pytest.fixture(scope="module")
def managed_broker() -> Iterator[str]:
    """A RabbitMQ node of the test's own with the management plugin: its AMQP URL."""
    need_tool("rabbitmq-server", "rabbitmq-server")
    node = RabbitCluster(first_port=5796, size=1, prefix="jobqdash",
                         plugins=("rabbitmq_management",),
                         conf=("management.tcp.ip = 127.0.0.1", f"management.tcp.port = {API_PORT}"))
    try:
        node.start()
        assert wait_until(api_answers, 60), "the management API of the test's node never answered"
        yield node.nodes[0].url
    finally:
        node.stop()


def api_answers() -> bool:
    request = urllib.request.Request(f"http://127.0.0.1:{API_PORT}/api/overview", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


async def declare_plain(url: str, name: str) -> None:
    """A queue of another application on the broker: bound to jobq's exchange, yet not jobq's."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, durable=True)
        await queue.bind("jobq", routing_key=name)


@pytest.mark.slow
def test_the_overview_lists_every_queue_of_both_backends_and_pauses_a_found_one(
        browser: WebDriver, schema: str, queue_name: str, managed_broker: str,
        tmp_path: Path) -> None:
    found = f"{queue_name}-found"
    env = schema_env(schema, JOBQ_DASHBOARD__TOKEN=TOKEN, JOBQ_RABBITMQ__URL=managed_broker,
                     JOBQ_DASHBOARD__RABBITMQ_API=f"http://127.0.0.1:{API_PORT}/")
    for queue, jobs in ((queue_name, 3), (found, 2)):
        Backend("postgres", queue, dict(env), schema=schema).produce(jobs)
        rabbit = Backend("rabbitmq", queue, dict(env))
        assert rabbit.run("jobq", "init").returncode == 0
        rabbit.produce(jobs)
    asyncio.run(declare_plain(managed_broker, f"{queue_name}-not-jobq"))
    dashboard = Dashboard(queue_name, env)  # configured: queue_name on each backend
    base = f"http://127.0.0.1:{dashboard.port}"
    try:
        browser.get(base + "/")
        rows = {(r.find_elements(By.TAG_NAME, "td")[0].text,
                 r.find_elements(By.TAG_NAME, "td")[1].text.split(" ")[0]):
                r.find_elements(By.TAG_NAME, "td")[2].text
                for r in browser.find_elements(By.XPATH, "//tr[td]")}
        shot(browser, tmp_path, "every-queue")
        assert set(rows) == {(q, t) for q in (queue_name, found) for t in ("postgres", "rabbitmq")
                             }, browser.page_source[:3000]
        assert rows[(found, "postgres")].startswith("pending 2"), rows
        assert rows[(found, "rabbitmq")].startswith("ready 2"), rows
        assert not browser.find_elements(By.CSS_SELECTOR, ".banner"), browser.page_source[:3000]

        browser.get(base + "/login")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.TAG_NAME, "form").submit()
        WebDriverWait(browser, 20).until(expected_conditions.url_to_be(base + "/"))
        row = browser.find_element(By.XPATH, f"//tr[td[1]/a[text()='{found}'] and "
                                             "td[2][starts-with(text(), 'rabbitmq')]]")
        row.find_element(By.TAG_NAME, "a").click()
        browser.find_element(By.XPATH, "//button[text()='pause']").click()
        banner = WebDriverWait(browser, 20).until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".banner")))
        assert "queue paused" in banner.text, banner.text
        assert Backend("rabbitmq", found, dict(env)).look("stats")["paused"] is True
        assert Backend("rabbitmq", queue_name, dict(env)).look("stats")["paused"] is False
    finally:
        dashboard.stop()
