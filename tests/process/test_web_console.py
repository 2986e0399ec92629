"""The web console in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
Selenium with the driver's path pinned: Selenium Manager never downloads anything), against a
real ``raftq console`` process and real brokers with tokens required.

The visitor logs in, is refused a write its token has no right to, logs in as an admin,
creates a topic, produces a test record, watches a group's lag fall as a consumer runs,
browses records and redrives a dead letter. Screenshots of each step go to the test's tmp
directory (paths printed); ``RAFTQ_CONSOLE_SCREENSHOT=docs/console.png`` also saves the group
page there (the README's screenshot). It runs with ``make test-slow`` (over 20 s).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from raftq.client import Consumer, Producer
from tests.helpers import wait_until
from tests.web_harness import ConsoleProcess, secured_console, token

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser_paths() -> tuple[str, str]:
    for path in (CHROMIUM, CHROMEDRIVER):
        assert shutil.which(path), (
            f"{path} is missing: install Debian's chromium and chromium-driver (make tools does)"
        )
    return CHROMIUM, CHROMEDRIVER


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[WebDriver]:
    binary, driver = browser_paths()
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace sandbox
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ):
        options.add_argument(argument)
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    chrome.set_page_load_timeout(120)
    try:
        yield chrome
    finally:
        chrome.quit()


class Visit:
    """The browser on the console, with a screenshot per step into ``shots``."""

    def __init__(self, chrome: WebDriver, console: ConsoleProcess, shots: Path) -> None:
        self.chrome, self.console, self.shots = chrome, console, shots
        self.taken: list[Path] = []

    def go(self, path: str) -> None:
        self.chrome.get(self.console.url + path)

    def text(self, element_id: str) -> str:
        """The element's text; "" while it is absent (a page still loading)."""
        try:
            found = self.chrome.find_elements(By.ID, element_id)
            return str(found[0].text) if found else ""
        except StaleElementReferenceException:  # redrawn by the page's script meanwhile
            return ""

    def fill(self, name: str, value: str) -> None:
        field = self.chrome.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)

    def click(self, element_id: str) -> None:
        self.chrome.find_element(By.ID, element_id).click()

    def outcome(self) -> str:
        """After an action: the page's notice, waiting for the answer's page to load; an error
        page fails the test with its text."""

        def shown() -> str:
            for element_id in ("notice", "error"):
                found = self.chrome.find_elements(By.ID, element_id)
                if found:
                    return f"{element_id}: {found[0].text}"
            return ""

        answer = wait_until(shown, 60, "the action's answer page")
        assert answer.startswith("notice: "), answer
        return answer

    def shot(self, name: str) -> Path:
        path = self.shots / f"console-{len(self.taken) + 1:02d}-{name}.png"
        assert self.chrome.save_screenshot(str(path)), path
        self.taken.append(path)
        print(f"screenshot: {path}")
        return path

    def login(self, principal: str) -> None:
        self.go("/login")
        self.fill("token", token(principal))
        self.click("login")
        wait_until(lambda: "/login" not in self.chrome.current_url, 30, "logged in")


@pytest.mark.slow  # ~30 s: three brokers, the console and a browser
def test_console_login_topic_produce_lag_and_redrive(browser: WebDriver, tmp_path: Path) -> None:
    with secured_console(tmp_path / "cluster") as (cluster, console):
        visit = Visit(browser, console, tmp_path)
        admin_client = {"token": token("admin")}

        visit.go("/")  # refused UNAUTHENTICATED: the login page
        wait_until(lambda: "/login" in browser.current_url, 30, "sent to log in")
        visit.shot("login")

        visit.login("reader")  # consume rights only: no write action
        visit.fill("name", "orders")
        visit.click("create-topic-button")
        wait_until(lambda: "PERMISSION_DENIED" in visit.text("error"), 60, "the refusal shown")
        visit.shot("refused")
        assert "orders" not in [t.name for t in cluster.admin().list_topics()]

        visit.go("/")
        visit.click("logout")
        visit.login("admin")
        wait_until(lambda: visit.text("health") in ("HEALTHY", "DEGRADED"), 60, "health shown")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#brokers tr")) == 1 + 3
        visit.fill("name", "orders")
        visit.fill("max_deliveries", "1")
        visit.click("create-topic-button")
        assert "topic orders created" in visit.outcome()
        cluster.wait_leaders("orders")

        visit.go("/topics/orders")
        visit.fill("key", "k-1")
        visit.fill("value", "hello from the console")
        visit.fill("priority", "3")
        visit.click("produce-button")
        assert "record stored at partition 0 offset 0" in visit.outcome()
        visit.shot("produced")

        with Producer(cluster.bootstrap, **admin_client) as producer:  # type: ignore[arg-type]
            for i in range(199):
                producer.send("orders", b"poison" if i == 99 else f"job {i}".encode())
            producer.flush()
        worker = Consumer(cluster.bootstrap, "workers", ["orders"], **admin_client)  # type: ignore[arg-type]
        try:
            visit.go("/groups/workers")
            wait_until(lambda: visit.text("total-lag") == "200", 30, "lag 200 shown")
            seen = ["200"]

            def consume(count: int) -> None:
                done = 0
                while done < count:
                    messages = worker.poll(count - done, timeout_ms=1_000)
                    for message in messages:
                        if message.value == b"poison":
                            message.nack()  # max_deliveries 1: dead-lettered
                        else:
                            message.ack()
                    done += len(messages)

            def lag_shown(value: str) -> bool:
                shown = visit.text("total-lag")
                if shown and shown != seen[-1]:
                    seen.append(shown)
                return shown == value

            consume(120)
            wait_until(lambda: lag_shown("80"), 30, "lag 80 drawn by the page's refresh")
            consume(80)
            wait_until(lambda: lag_shown("0"), 30, "lag 0 drawn by the page's refresh")
            assert seen[0] == "200" and seen[-1] == "0" and "80" in seen
            assert [int(s) for s in seen] == sorted((int(s) for s in seen), reverse=True)
            points = browser.find_element(By.CSS_SELECTOR, "#lag-chart polyline")
            assert len((points.get_attribute("points") or "").split()) >= 3  # lag over time
            shot = visit.shot("group-lag")
            target = os.environ.get("RAFTQ_CONSOLE_SCREENSHOT")
            if target:
                shutil.copyfile(shot, target)
        finally:
            worker.close()

        visit.go("/topics/orders/partitions/0")
        rows = browser.find_elements(By.CSS_SELECTOR, "#records tr")
        assert len(rows) == 1 + 50  # the last page of 50
        visit.go("/topics/orders/partitions/0?offset=0")
        first = browser.find_elements(By.CSS_SELECTOR, "#records tr")[1].text
        assert "k-1" in first and "hello from the console" in first and " 3 " in f" {first} "
        visit.shot("records")

        def dead_letter_listed() -> bool:
            visit.go("/topics/orders/dead-letters")
            return visit.text("waiting") == "1"

        wait_until(dead_letter_listed, 30, "the dead letter listed")
        row = browser.find_elements(By.CSS_SELECTOR, "#dead-letters tr")[1].text
        assert "poison" in row and "orders/0@100" in row and "workers" in row
        visit.shot("dead-letters")
        visit.click("redrive")
        assert "redrove 1 dead letters" in visit.outcome()
        assert visit.text("waiting") == "0"
        visit.shot("redriven")
        end = cluster.admin().list_offsets("orders")[0].end
        back = cluster.admin().fetch("orders", 0, end - 1, max_records=1).records[0]
        assert back.value == b"poison" and back.offset == 200
        assert len(visit.taken) == 7
