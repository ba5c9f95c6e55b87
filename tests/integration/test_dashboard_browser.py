"""The dashboard in a real browser: Debian's headless Chromium, driven by Selenium through its
chromedriver, on each backend: open the page, find the queue, see a dead job and its error
(its ``<script>`` payload shown as text, never run), log in, requeue it, see it done.

The screenshots go to the test's directory, and to $JOBQ_SCREENSHOTS when it is set (the
README's and docs/dashboard.md's come from ``JOBQ_SCREENSHOTS=docs/img pytest ...``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from tests.conftest import PG_DSN, fetch, jobs_table, need_tool, schema_env
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
