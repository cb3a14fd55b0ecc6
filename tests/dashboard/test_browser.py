"""The dashboard in a real headless Chromium, driven by Selenium.

A memory queue with a real `Runner` and the dashboard's uvicorn server run in a thread
of their own (one event loop, started and stopped by the fixture); the test drives the
system chromium through the system chromedriver, so Selenium Manager never downloads
anything. The tasks wait on a gate the test opens, so "numbers change while the worker
runs" is a fact the test causes, not a race it hopes to win.

The dashboard has a token, so the test first checks what a browser without a session
gets: the sign-in page for every page, 401 from the API, the security headers as the
browser received them (read by the page's own fetch), and framing refused: a page of
another origin (a second server on another port) frames the dashboard's sign-in page
and a plain page of its own; the plain one shows, the dashboard's frame holds nothing
of it.

Without chromium and chromedriver the test skips, saying so; with
``TASKRUNNER_TEST_REQUIRE_BROWSER=1`` (set in .ci/run) it fails instead. Screenshots go to
``TASKRUNNER_TEST_SCREENSHOT_DIR`` when set (``docs/images`` regenerates the docs'), else to
the test's tmp_path.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from taskrunner.app import App
from taskrunner.config import RunnerConfig
from taskrunner.dashboard.build import build_dashboard
from taskrunner.dashboard.security import Guard
from taskrunner.dashboard.server import Server
from taskrunner.producer import Producer
from taskrunner.runner import Runner
from taskrunner_backends.memory import open_from_url
from tests.dashboard.support import TOKEN

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

TASKS = 40
HOSTILE = "<script>window.__xss = 1</script><b>bold?</b>"
# Bounded waits for the DOM: a refresh is every 2 s, so 15 s is several refreshes.
WAIT_SECONDS = 15


class Email(msgspec.Struct, frozen=True):
    """Payload of the test's tasks."""

    to: str
    note: str = ""


def _browser_paths() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return None if chromium is None or driver is None else (chromium, driver)


class LiveDashboard:
    """A memory queue, a runner and the dashboard, in a thread with its own event loop."""

    def __init__(self) -> None:
        self.url = f"memory://browser-{uuid.uuid4().hex[:10]}"
        self.port = 0
        self.dead_ids: list[str] = []
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._gate: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="live-dashboard", daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("the dashboard did not start within 30 s")
        if self._failure is not None:
            raise self._failure

    def open_gate(self) -> None:
        """Let every task finish (they wait for this)."""
        assert self._loop is not None
        assert self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.set)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._gate.set)  # type: ignore[union-attr]
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        assert not self._thread.is_alive(), "the dashboard thread did not stop within 30 s"
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the test thread by stop()
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        gate = self._gate = asyncio.Event()
        app = App("emails")

        @app.task(name="emails.send", max_retries=0)
        async def send(email: Email) -> None:
            await gate.wait()

        @app.task(name="emails.bounce", max_retries=0)
        async def bounce(email: Email) -> None:
            raise ValueError(f"mailbox {email.to} does not exist")

        queue = await open_from_url(self.url, queue_name="emails")
        producer = Producer(queue, app)
        # Two dead letters, the first with an HTML payload the pages must show as text.
        self.dead_ids = await producer.dispatch_many(
            "emails.bounce", [Email(to="x@example.com", note=HOSTILE), Email(to="y@example.com")]
        )
        await producer.dispatch_many(
            "emails.send", [Email(to=f"u{i}@example.com") for i in range(TASKS)]
        )
        runners: list[Runner] = []
        board = build_dashboard(
            self.url,
            ["emails"],
            guard=Guard(TOKEN),
            completed_source=lambda: sum(r.stats().succeeded for r in runners),
        )
        server = Server(board, port=0)
        runner = Runner(
            queue,
            app,
            RunnerConfig(
                num_workers=4, batch_size=4, block_seconds=0.2, monitor_interval_seconds=0.5
            ),
        )
        runners.append(runner)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(server.run())
                self.port = await server.started()
                group.create_task(runner.run())
                self._ready.set()
                await self._stop.wait()
                runner.stop()
                server.stop()
        finally:
            await queue.aclose()


class FramingSite:
    """Another origin (its own port): ``/`` frames the dashboard's page and a plain page."""

    def __init__(self, framed: str) -> None:
        pages = {
            "/": (
                f'<!doctype html><title>other site</title><iframe id="dashboard" src="{framed}">'
                '</iframe><iframe id="plain" src="/plain"></iframe>'
            ),
            "/plain": '<!doctype html><title>plain</title><p id="token">a plain page</p>',
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path, "not found").encode()
                self.send_response(200 if self.path in pages else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(30)


@pytest.fixture
def live() -> Iterator[LiveDashboard]:
    dashboard = LiveDashboard()
    dashboard.start()
    try:
        yield dashboard
    finally:
        dashboard.stop()


@pytest.fixture
def browser() -> Iterator[object]:
    paths = _browser_paths()
    if paths is None:
        reason = (
            "needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver)"
        )
        if os.environ.get("TASKRUNNER_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TASKRUNNER_TEST_REQUIRE_BROWSER=1 but the browser is missing: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    # The console, where the browser says why it refused to frame a page.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    given = os.environ.get("TASKRUNNER_TEST_SCREENSHOT_DIR")
    directory = Path(given) if given else tmp_path
    directory.mkdir(parents=True, exist_ok=True)
    return directory


# The browser first: without one the test skips before the dashboard is started.
def test_the_dashboard_in_a_browser(browser: object, live: LiveDashboard, shots: Path) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.chromium.webdriver import ChromiumDriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    assert isinstance(browser, ChromiumDriver)  # its get_log reads the console
    driver = browser
    # A page that navigates (sign-out, a confirmed action) or refreshes itself can replace
    # an element between finding it and reading it: the wait tries again until its deadline.
    wait = WebDriverWait(
        driver,
        WAIT_SECONDS,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    )

    def cell(field: str) -> str:
        selector = f'tr[data-queue="emails"] td[data-field="{field}"]'
        return str(driver.find_element(By.CSS_SELECTOR, selector).text)

    def dead_ids() -> list[str]:
        rows = driver.find_elements(By.CSS_SELECTOR, "#dead-letters tbody tr")
        return [str(r.get_attribute("data-dead-id")) for r in rows]

    def fetched(path: str) -> dict[str, Any]:
        """Status and headers of `path` as this browser receives them (the page's fetch)."""
        script = (
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0], {redirect: 'manual'}).then(r => done({status: r.status,"
            " type: r.type, headers: Object.fromEntries(r.headers.entries())}))"
            ".catch(e => done({error: String(e)}));"
        )
        answer: dict[str, Any] = driver.execute_async_script(script, path)
        return answer

    # No session: a page is the sign-in page (nothing of the queue), the API is refused.
    driver.get(live.base + "/queues/emails")
    wait.until(lambda d: d.find_elements(By.ID, "token"))
    assert "/login?next=%2Fqueues%2Femails" in driver.current_url
    assert "emails.send" not in driver.page_source
    assert "memory://" not in driver.page_source
    assert fetched("/api/queues")["status"] == 401

    def check_headers(*paths: str) -> None:
        for path in paths:
            answer = fetched(path)
            headers = answer.get("headers", {})
            assert "content-security-policy" in headers, (path, answer)
            assert "frame-ancestors 'none'" in headers["content-security-policy"], path
            assert headers["x-frame-options"] == "DENY", path
            assert headers["x-content-type-options"] == "nosniff", path
            assert headers["referrer-policy"] == "no-referrer", path

    # The headers, as the browser got them: the sign-in page, its stylesheet, a 401 (a
    # redirect is opaque to scripts; tests/dashboard/test_headers.py checks those).
    check_headers("/login", "/static/dashboard.css", "/api/overview")
    driver.save_screenshot(str(shots / "dashboard-sign-in.png"))

    def console() -> list[dict[str, Any]]:
        """The browser console's entries since the last call (selenium leaves it untyped)."""
        entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
        return entries

    # Framing refused: another origin frames the sign-in page and a plain page.
    site = FramingSite(live.base + "/login")
    try:
        console()  # drop what came before
        driver.get(site.base + "/")
        driver.switch_to.frame(driver.find_element(By.ID, "plain"))
        # The control: a page without the headers shows in a frame (the check can fail).
        wait.until(lambda d: d.find_elements(By.ID, "token"))
        driver.switch_to.default_content()
        refusal = wait.until(lambda _: [e for e in console() if "frame-ancestors" in e["message"]])
        # Chromium's words: "Framing 'http://127.0.0.1:PORT/' violates ... 'none'" ...
        assert f"'{live.base}/'" in refusal[0]["message"]
        assert "frame-ancestors 'none'" in refusal[0]["message"]
        driver.switch_to.frame(driver.find_element(By.ID, "dashboard"))
        assert not driver.find_elements(By.ID, "token")
        assert "taskrunner" not in driver.page_source
        driver.switch_to.default_content()
    finally:
        site.close()

    # Sign in by keyboard: back to the page that asked, here the overview.
    driver.get(live.base + "/")
    token = wait.until(lambda d: d.find_element(By.ID, "token"))
    assert driver.find_element(By.CSS_SELECTOR, 'label[for="token"]').text
    token.send_keys(TOKEN)
    token.send_keys(Keys.ENTER)
    wait.until(lambda d: "actions enabled" in d.find_element(By.TAG_NAME, "header").text)
    assert fetched("/api/queues")["status"] == 200
    # Signed in: pages, the API and a 404 carry them too.
    check_headers("/", "/queues/emails", "/api/queues", "/static/nothing")
    assert fetched("/static/nothing")["status"] == 404

    # Overview: the worker holds 4 tasks (its pool) behind the gate; the rest wait.
    driver.get(live.base + "/")
    wait.until(lambda _: cell("in_flight") == "4" and cell("dead") == "2")
    assert cell("ready") == str(TASKS - 4)
    # The worker's process appears from the registry (it publishes every half second).
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#workers tbody tr"))
    assert "emails" in driver.find_element(By.CSS_SELECTOR, "#workers tbody tr").text
    # Pool size 4, all 4 busy behind the gate, once the runner has published that.
    wait.until(lambda _: cell("workers") == "4 (4)")
    driver.save_screenshot(str(shots / "dashboard-overview.png"))

    # The queue page, in a second tab: the waiting and in-flight messages one by one.
    overview_tab = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.get(live.base + "/queues/emails")
    waiting = driver.find_elements(By.CSS_SELECTOR, "#waiting tbody tr")
    in_flight = driver.find_elements(By.CSS_SELECTOR, "#in-flight tbody tr")
    assert len(waiting) == TASKS - 4
    assert len(in_flight) == 4
    assert "emails.send" in waiting[0].text
    assert "Showing at most 50 per page" in driver.find_element(By.ID, "main").text
    driver.save_screenshot(str(shots / "dashboard-queue.png"))
    queue_tab = driver.current_window_handle
    driver.switch_to.window(overview_tab)

    # The numbers change while the worker runs, without reloading the page.
    live.open_gate()
    wait.until(lambda _: cell("ready") == "0" and cell("in_flight") == "0")
    wait.until(lambda d: d.find_element(By.ID, "rate-completed").text not in ("-", "unknown"))
    driver.save_screenshot(str(shots / "dashboard-overview-drained.png"))

    # The queue page refreshed itself too (no reload): both lists emptied.
    driver.switch_to.window(queue_tab)
    wait.until(lambda d: d.find_element(By.ID, "ready").text == "0")
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#waiting tbody tr"))
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#in-flight tbody tr"))
    assert driver.find_element(By.CSS_SELECTOR, "section[data-state=waiting] .empty").is_displayed()
    driver.close()
    driver.switch_to.window(overview_tab)

    # Keyboard: the first Tab reaches the skip link.
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert driver.switch_to.active_element.text == "Skip to content"

    # A dead letter's HTML payload is shown as text and never runs.
    driver.get(live.base + "/queues/emails/dead")
    assert len(dead_ids()) == 2
    first = dead_ids()[0]
    driver.find_element(By.LINK_TEXT, first).click()
    payload = wait.until(lambda d: d.find_element(By.ID, "payload"))
    assert "<script>window.__xss = 1</script>" in payload.text
    assert driver.execute_script("return window.__xss === undefined")
    assert not driver.find_elements(By.CSS_SELECTOR, "#payload b")
    driver.save_screenshot(str(shots / "dashboard-dead-letter.png"))

    # Retry it through the UI, by keyboard: confirm, see it leave.
    driver.get(live.base + "/queues/emails/dead")
    driver.find_element(By.CSS_SELECTOR, f'tr[data-dead-id="{first}"] a.retry').send_keys(
        Keys.ENTER
    )
    confirm = wait.until(lambda d: d.find_element(By.ID, "confirm"))
    assert first in driver.find_element(By.ID, "question").text
    driver.save_screenshot(str(shots / "dashboard-confirm.png"))
    confirm.send_keys(Keys.ENTER)
    done = wait.until(lambda d: d.find_element(By.ID, "done"))
    assert "retry: 1 dead letter(s)" in done.text
    assert first not in dead_ids()
    # The retried bounce fails again and comes back under a new id, or has not yet.
    assert len(dead_ids()) in (1, 2)
    driver.save_screenshot(str(shots / "dashboard-dead-letters.png"))
    # The list refreshes itself: the bounce's new dead letter appears without a reload.
    wait.until(lambda _: len(dead_ids()) == 2)
    assert first not in dead_ids()
    assert driver.find_element(By.ID, "dead-count").text.startswith("2 dead letter(s)")

    # Sign out by keyboard: the session ends, and with it the reading and the actions.
    # The overview, open in another tab, goes to the sign-in page at its next refresh.
    dead_tab = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.get(live.base + "/?page=1")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-queue="emails"]'))
    overview_tab = driver.current_window_handle
    driver.switch_to.window(dead_tab)
    driver.find_element(By.ID, "logout").send_keys(Keys.ENTER)
    wait.until(lambda d: d.find_elements(By.ID, "token"))
    driver.switch_to.window(overview_tab)
    wait.until(lambda d: d.find_elements(By.ID, "token"))
    assert "/login?next=%2F%3Fpage%3D1" in driver.current_url
    driver.close()
    driver.switch_to.window(dead_tab)
    driver.get(live.base + "/queues/emails/dead")
    wait.until(lambda d: d.find_elements(By.ID, "token"))
    assert not driver.find_elements(By.CSS_SELECTOR, "a.retry")
    assert fetched("/api/queues")["status"] == 401

    shown = (
        "sign-in",
        "overview",
        "overview-drained",
        "queue",
        "dead-letter",
        "confirm",
        "dead-letters",
    )
    for name in shown:
        assert (shots / f"dashboard-{name}.png").stat().st_size > 1000
