"""The dashboard's JSON API and pages over memory queues (and Redis, marked)."""

from __future__ import annotations

import re
import time

import pytest

from taskrunner import Runner, RunnerConfig
from taskrunner.app import App
from taskrunner.dashboard import Dashboard, Guard, QueueSet, Sampler
from taskrunner.dashboard.build import build_dashboard
from taskrunner.dashboard.data import PAGE_SIZE, WORKERS_SHOWN
from taskrunner.errors import BackendUnavailableError, ConfigurationError
from taskrunner.producer import Producer
from taskrunner.queue import AddRequest, Flow, Queue, WorkerInfo, leadership_of
from taskrunner.scheduler import ELECTION
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue, open_from_url
from tests.dashboard.support import TOKEN, CountingQueue, client, dashboard, memory_url
from tests.support import running


async def _dead_letter(queue: Queue, app: App, payload: object, *, reason: str) -> str:
    """Dispatch one task and dead-letter it; returns its message id."""

    @app.task(name="t.echo")
    def echo(value: object) -> None: ...

    [message_id] = await Producer(queue, app).dispatch_many("t.echo", [payload])
    [delivery] = await queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=30)
    await queue.dead_letter([delivery], reason=reason)
    return message_id


async def test_api_queues_gives_one_object_per_queue_with_its_counts() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    await queue.add([b"x", b"y", b"z"])
    [delivery] = await queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=30)
    await queue.dead_letter([delivery], reason="boom")
    await queue.receive("c2", max_messages=1, wait_seconds=0, lease_seconds=30)
    board = dashboard(url, ["jobs", "empty"])
    async with client(board) as http:
        response = await http.get("/api/queues")
    await board.queues.aclose()

    assert response.status_code == 200
    body = response.json()
    assert [q["name"] for q in body["queues"]] == ["jobs", "empty"]
    jobs, empty = body["queues"]
    assert (jobs["ready"], jobs["in_flight"], jobs["dead"], jobs["delayed"]) == (1, 1, 1, 0)
    assert (empty["ready"], empty["in_flight"], empty["dead"]) == (0, 0, 0)
    assert body["total_queues"] == 2
    assert body["pages"] == 1


async def test_one_refresh_stats_only_the_page_shown_once_each() -> None:
    names = [f"q{i:04}" for i in range(1000)]
    counts: dict[str, int] = {}
    board = dashboard(memory_url(), names, counts=counts)
    async with client(board) as http:
        first = await http.get("/api/overview?page=1")
        assert counts == dict.fromkeys(names[:PAGE_SIZE], 1)
        counts.clear()
        last = await http.get("/api/overview?page=20")
        assert counts == dict.fromkeys(names[-PAGE_SIZE:], 1)
        counts.clear()
        html = await http.get("/?page=2")
        assert counts == dict.fromkeys(names[PAGE_SIZE : 2 * PAGE_SIZE], 1)
        counts.clear()
        past = await http.get("/api/queues?page=999")
    await board.queues.aclose()

    assert [q["name"] for q in first.json()["queues"]] == names[:PAGE_SIZE]
    assert last.json()["pages"] == 20
    assert html.status_code == 200
    assert "1000 queue(s); page 2 of 20" in html.text
    # A page past the end shows the last page, still at one call per queue.
    assert past.json()["page"] == 20
    assert counts == dict.fromkeys(names[-PAGE_SIZE:], 1)


@pytest.mark.parametrize("page", ["0", "-1", "x", "1.5"])
async def test_a_bad_page_number_is_refused_naming_it(page: str) -> None:
    board = dashboard(memory_url(), ["a"])
    async with client(board) as http:
        api = await http.get(f"/api/queues?page={page}")
        html = await http.get(f"/?page={page}")
    await board.queues.aclose()

    assert api.status_code == 400
    assert "page must be" in api.json()["error"]
    assert html.status_code == 400


async def test_an_unknown_queue_is_404_and_never_opened() -> None:
    opened: list[str] = []
    board = dashboard(memory_url(), ["a"])
    inner = board.queues._opener

    async def opener(name: str) -> Queue:
        opened.append(name)
        return await inner(name)

    board.queues._opener = opener
    async with client(board) as http:
        response = await http.get("/api/queues/other")
        page = await http.get("/queues/other/dead")
    await board.queues.aclose()

    assert response.status_code == 404
    assert "no queue 'other'" in response.json()["error"]
    assert page.status_code == 404
    assert opened == []


async def test_workers_come_from_the_registry_with_pool_size_and_busy() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    registry = queue.worker_registry
    now = time.time()
    for i in range(3):
        info = WorkerInfo(instance=f"host-{i}", workers=8, busy=i, average_seconds=0.5, seen_at=now)
        await registry.publish_worker(info, ttl_seconds=60)
    await queue.add([b"m"] * 12)
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        body = (await http.get("/api/overview")).json()
    await board.queues.aclose()

    assert [w["instance"] for w in body["workers"]] == ["host-0", "host-1", "host-2"]
    assert [w["busy"] for w in body["workers"]] == [0, 1, 2]
    [row] = body["queues"]
    assert (row["workers"], row["busy"]) == (24, 3)
    # 12 ready x 0.5 s / 24 workers.
    assert row["predicted_wait_seconds"] == pytest.approx(0.25)
    assert body["average_task_seconds"] == pytest.approx(0.5)


async def test_dead_letters_decode_the_payload_and_pages_escape_html() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    await _dead_letter(queue, App("jobs"), {"html": hostile}, reason=f"failed: {hostile}")
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        listing = (await http.get("/api/queues/jobs/dead-letters")).json()
        [letter] = listing["dead_letters"]
        one = await http.get(f"/queues/jobs/dead/{letter['id']}")
        page = await http.get("/queues/jobs/dead")
    await board.queues.aclose()

    assert letter["task"] == "t.echo"
    assert hostile in letter["payload"]  # the API gives the text as it is
    for html in (one.text, page.text):
        assert "<script>alert" not in html
        assert "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in one.text


async def test_a_body_that_is_no_envelope_is_shown_as_base64() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    await queue.add([b"\xff<b>raw</b>"])
    [delivery] = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=30)
    await queue.dead_letter([delivery], reason="undecodable")
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        [letter] = (await http.get("/api/queues/jobs/dead-letters")).json()["dead_letters"]
        page = await http.get(f"/queues/jobs/dead/{letter['id']}")
    await board.queues.aclose()

    assert letter["task"] is None
    assert letter["payload"] is None
    assert letter["body_base64"] == "/zxiPnJhdzwvYj4="
    assert "/zxiPnJhdzwvYj4=" in page.text
    assert "<b>raw" not in page.text


async def test_message_status_by_id() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    [message_id] = await queue.add([b"x"])
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        found = (await http.get(f"/api/queues/jobs/messages/{message_id}")).json()
        unknown = (await http.get("/api/queues/jobs/messages/nope-123")).json()
        page = await http.get(f"/queues/jobs?id={message_id}")
    await board.queues.aclose()

    assert found["state"] == "ready"
    assert unknown["state"] == "unknown"
    assert page.status_code == 200
    assert re.search(r"<dt>State</dt><dd>ready</dd>", page.text)


async def test_a_message_waiting_for_a_slot_says_so_on_its_page() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    part = queue.scheduling
    assert part is not None
    flow = Flow(key="sync:<acme>", concurrency=1)
    holder, behind = (
        a.message_id for a in await part.add_requests([AddRequest(body=b"x", flow=flow)] * 2)
    )
    await queue.receive("w-1", max_messages=5, wait_seconds=0, lease_seconds=30)
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        found = (await http.get(f"/api/queues/jobs/messages/{behind}")).json()
        page = await http.get(f"/queues/jobs?id={behind}")
    await board.queues.aclose()

    assert found["waiting_for"].startswith(
        f"a concurrency slot of 'sync:<acme>', held by {holder} (running on w-1"
    )
    assert '<dd id="waiting-for">a concurrency slot of &#39;sync:&lt;acme&gt;&#39;' in page.text


async def test_the_backend_url_is_shown_masked() -> None:
    board = dashboard(memory_url(), ["a"])
    board.url = "redis://:***@db.internal:6379/0"
    async with client(board) as http:
        page = await http.get("/")
    await board.queues.aclose()

    assert "redis://:***@db.internal:6379/0" in page.text


def test_build_dashboard_masks_the_secret_options_of_its_url() -> None:
    board = build_dashboard("memory://store?tenant=a&token=S3CRET9X", ["a"])

    assert board.url == "memory://store?tenant=a&token=***"


# Actions ---------------------------------------------------------------------------


async def _signed_in_board(*, letters: int = 2) -> tuple[Queue, Dashboard]:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    app = App("jobs")
    for i in range(letters):
        # A fresh App each time: the helper registers its task on the App it is given.
        await _dead_letter(queue, app if i == 0 else App("jobs"), {"n": i}, reason="bad")
    return queue, dashboard(url, ["jobs"], guard=Guard(TOKEN))


async def test_read_only_dashboard_refuses_every_action() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    await _dead_letter(queue, App("jobs"), 1, reason="bad")
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        login = await http.post("/login", data={"token": TOKEN})
        act = await http.post(
            "/queues/jobs/dead/action", data={"action": "retry", "id": "all", "csrf": "x"}
        )
        page = await http.get("/queues/jobs/dead")
    await board.queues.aclose()

    assert login.status_code == 403
    assert act.status_code == 403
    assert "--allow-actions" in act.text
    assert "Retry" not in page.text
    assert (await queue.stats()).dead == 1


async def test_an_action_needs_the_session_and_the_csrf_value() -> None:
    queue, board = await _signed_in_board()
    guard = board.guard
    assert guard is not None
    form = {"action": "purge", "id": "all", "csrf": guard.csrf}
    async with client(board) as http:
        anonymous = await http.post("/queues/jobs/dead/action", data=form)
        wrong_token = await http.post("/login", data={"token": TOKEN + "x"})
        assert wrong_token.status_code == 403
        signed = await http.post("/login", data={"token": TOKEN})
        assert signed.status_code == 303
        no_csrf = await http.post("/queues/jobs/dead/action", data={**form, "csrf": ""})
        bad_csrf = await http.post("/queues/jobs/dead/action", data={**form, "csrf": "0" * 64})
        assert (await queue.stats()).dead == 2
        done = await http.post("/queues/jobs/dead/action", data=form)
    await board.queues.aclose()

    assert anonymous.status_code == 403
    assert no_csrf.status_code == 403
    assert bad_csrf.status_code == 403
    assert done.status_code == 303
    assert "purge" in done.headers["location"]
    assert (await queue.stats()).dead == 0


async def test_the_done_message_is_the_servers_not_the_query_strings() -> None:
    _, board = await _signed_in_board()
    assert board.guard is not None
    forged = "purge: 999 dead letter(s). Sign in again at https://evil.example"
    async with client(board) as http:
        await http.post("/login", data={"token": TOKEN})
        echoed = await http.get("/queues/jobs/dead", params={"done": forged})
        form = {"action": "purge", "id": "all", "csrf": board.guard.csrf}
        done = await http.post("/queues/jobs/dead/action", data=form)
        shown = await http.get(done.headers["location"])
        again = await http.get(done.headers["location"])
    await board.queues.aclose()

    assert echoed.status_code == 200
    assert "evil.example" not in echoed.text
    assert 'id="done"' not in echoed.text
    assert "Done: purge: 2 dead letter(s)" in shown.text
    # Shown once: a reload or a shared link does not repeat it.
    assert 'id="done"' not in again.text


async def test_retry_one_moves_only_that_letter_back_to_the_queue() -> None:
    queue, board = await _signed_in_board()
    assert board.guard is not None
    async with client(board) as http:
        await http.post("/login", data={"token": TOKEN})
        letters = (await http.get("/api/queues/jobs/dead-letters")).json()["dead_letters"]
        first = letters[0]["id"]
        confirm = await http.get(f"/queues/jobs/dead/confirm?action=retry&id={first}")
        assert confirm.status_code == 200
        assert board.guard.csrf in confirm.text
        await http.post(
            "/queues/jobs/dead/action",
            data={"action": "retry", "id": first, "csrf": board.guard.csrf},
        )
        after = (await http.get("/api/queues/jobs/dead-letters")).json()["dead_letters"]
    await board.queues.aclose()

    assert [x["id"] for x in after] == [letters[1]["id"]]
    stats = await queue.stats()
    assert (stats.ready, stats.dead) == (1, 1)


def test_a_short_token_is_refused_naming_the_rule() -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        Guard("short")


def test_generated_tokens_differ_and_derive_distinct_values() -> None:
    one, two = Guard(), Guard()
    assert one.token != two.token
    session = two.sign_in(0.0)
    assert one.csrf != session
    assert not one.csrf_matches(two.csrf)
    assert not one.signed_in(session, 0.0)
    assert two.signed_in(session, 0.0)


async def test_workers_are_capped_and_the_page_says_so() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    registry = queue.worker_registry
    now = time.time()
    for i in range(WORKERS_SHOWN + 1):
        info = WorkerInfo(instance=f"h{i:03}", workers=1, busy=0, average_seconds=None, seen_at=now)
        await registry.publish_worker(info, ttl_seconds=60)
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        body = (await http.get("/api/overview")).json()
        page = await http.get("/")
    await board.queues.aclose()

    assert len(body["workers"]) == WORKERS_SHOWN
    assert body["workers_total"] == WORKERS_SHOWN + 1
    assert f"(the first {WORKERS_SHOWN} shown)" in page.text


class _Unreachable:
    async def stats(self) -> None:
        raise BackendUnavailableError("connection refused (simulated)")

    async def aclose(self) -> None:
        pass


async def test_a_failing_queue_shows_its_error_and_the_others_still_show() -> None:
    url = memory_url()
    good = await open_from_url(url, queue_name="good")
    await good.add([b"x"])

    async def opener(name: str) -> Queue:
        if name == "bad":
            broken: Queue = _Unreachable()  # type: ignore[assignment]
            return broken
        return await open_from_url(url, queue_name=name)

    board = Dashboard(queues=QueueSet(["bad", "good"], opener), url="memory://")
    async with client(board) as http:
        rows = (await http.get("/api/queues")).json()["queues"]
        page = await http.get("/queues/bad")
    await board.queues.aclose()

    assert rows[0]["name"] == "bad"
    assert "connection refused (simulated)" in rows[0]["error"]
    assert (rows[1]["name"], rows[1]["ready"], rows[1]["error"]) == ("good", 1, None)
    assert page.status_code == 502


async def test_schedules_show_last_fire_from_the_backend_and_next_fire() -> None:
    url = memory_url()
    app = App("jobs")

    @app.task(name="t.tick")
    def tick() -> None: ...

    app.schedule("every-minute", tick, every=60)
    app.schedule("<b>hourly</b>", tick, cron="0 * * * *")
    queue = await open_from_url(url, queue_name="jobs")
    leadership = leadership_of(queue)
    assert leadership is not None
    lease = await leadership.acquire_leadership(ELECTION, "me", ttl_seconds=30)
    assert lease is not None
    board = dashboard(url, ["jobs"])
    board.app = app
    async with client(board) as http:
        before = (await http.get("/api/schedules")).json()
        fired = await leadership.fire(
            election=ELECTION, token=lease.token, schedule="every-minute", instant=600.0, body=b"x"
        )
        after = (await http.get("/api/schedules")).json()
        page = await http.get("/schedules")
    await board.queues.aclose()

    assert before["leadership"] is True
    assert {s["name"]: s["last_fired"] for s in before["schedules"]}["every-minute"] is None
    assert fired is not None
    assert after["leader"] == "me"
    by_name = {s["name"]: s for s in after["schedules"]}
    assert by_name["every-minute"]["last_fired"] == 600.0
    assert by_name["every-minute"]["next"] > time.time() - 1
    assert by_name["every-minute"]["next"] % 60 == 0
    assert "&lt;b&gt;hourly&lt;/b&gt;" in page.text


async def test_without_an_app_there_are_no_schedules() -> None:
    board = dashboard(memory_url(), ["jobs"])
    async with client(board) as http:
        body = (await http.get("/api/schedules")).json()
        page = await http.get("/")
    await board.queues.aclose()

    assert body == {"schedules": [], "leadership": False, "leader": None}
    assert 'href="/schedules"' not in page.text


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.evil.example", "10.0.0.5:8181"])
async def test_a_loopback_dashboard_refuses_other_host_names(host: str) -> None:
    board = dashboard(memory_url(), ["a"])
    async with client(board) as http:
        refused = await http.get("/api/queues", headers={"Host": host})
        served = await http.get("/api/queues", headers={"Host": "localhost:8181"})
    await board.queues.aclose()

    assert refused.status_code == 400
    assert served.status_code == 200


async def test_without_a_host_list_any_host_is_served() -> None:
    board = dashboard(memory_url(), ["a"])
    board.allowed_hosts = None
    async with client(board) as http:
        served = await http.get("/api/queues", headers={"Host": "dash.internal"})
    await board.queues.aclose()

    assert served.status_code == 200


async def test_a_name_filter_pages_the_matching_queues_and_stats_only_those() -> None:
    names = [f"emails-{i:03}" for i in range(60)] + [f"images-{i:03}" for i in range(60)]
    counts: dict[str, int] = {}
    board = dashboard(memory_url(), names, counts=counts)
    async with client(board) as http:
        first = (await http.get("/api/queues?filter=IMAGES")).json()
        assert counts == dict.fromkeys(names[60:110], 1)
        counts.clear()
        second = (await http.get("/api/queues?filter=images&page=2")).json()
        none = (await http.get("/api/queues?filter=%3Cscript%3E")).json()
        page = await http.get("/?filter=%3Cscript%3E")
    await board.queues.aclose()

    assert (first["total_queues"], first["pages"]) == (60, 2)
    assert [q["name"] for q in second["queues"]] == names[110:]
    assert counts == dict.fromkeys(names[110:], 1)
    assert (none["total_queues"], none["queues"]) == (0, [])
    assert "<script>" not in page.text
    assert 'value="&lt;script&gt;"' in page.text


async def test_handles_beyond_the_cap_are_closed_least_recently_used_first() -> None:
    url = memory_url()
    closed: list[str] = []

    class Closing(CountingQueue):
        async def aclose(self) -> None:
            closed.append(self._name)
            await self._inner.aclose()

    async def opener(name: str) -> Queue:
        wrapped: Queue = Closing(await open_from_url(url, queue_name=name), {}, name)
        return wrapped

    names = [f"q{i:03}" for i in range(3 * PAGE_SIZE)]
    queues = QueueSet(names, opener, max_open=2 * PAGE_SIZE)
    board = Dashboard(queues=queues, url="memory://")
    async with client(board) as http:
        await http.get("/api/queues?page=1")
        await http.get("/api/queues?page=2")
        assert closed == []
        await http.get("/api/queues?page=1")  # page 1 is now the most recent
        await http.get("/api/queues?page=3")
        assert closed == names[PAGE_SIZE : 2 * PAGE_SIZE]  # page 2's handles
        assert sorted(queues.open_names) == names[:PAGE_SIZE] + names[2 * PAGE_SIZE :]
        again = (await http.get("/api/queues?page=2")).json()
    await queues.aclose()

    assert all(q["error"] is None for q in again["queues"])


def test_a_cap_below_one_is_refused() -> None:
    async def opener(name: str) -> Queue:
        raise AssertionError("never opened")

    with pytest.raises(ValueError, match="max_open must be >= 1, got 0"):
        QueueSet(["a"], opener, max_open=0)


async def test_a_queue_that_cannot_be_opened_shows_its_error_on_its_row() -> None:
    url = memory_url()

    async def opener(name: str) -> Queue:
        if name == "down":
            raise BackendUnavailableError("server unreachable (simulated)")
        return await open_from_url(url, queue_name=name)

    board = Dashboard(queues=QueueSet(["down", "up"], opener), url="memory://")
    async with client(board) as http:
        response = await http.get("/api/overview")
    await board.queues.aclose()

    assert response.status_code == 200
    down, up = response.json()["queues"]
    assert "server unreachable (simulated)" in down["error"]
    assert up["error"] is None


async def test_completed_and_failed_rates_come_from_workers_running_elsewhere() -> None:
    """No in-process source: the overview's rates are read from the worker registry."""
    clock = FakeClock()
    queue = InMemoryQueue(clock=clock)
    app = App("jobs")

    @app.task(max_retries=0)
    async def job(ok: bool) -> None:
        if not ok:
            raise ValueError("no")

    async def opener(name: str) -> Queue:
        return queue

    board = Dashboard(
        queues=QueueSet([app.queue], opener), url="memory://", sampler=Sampler(clock=clock)
    )
    producer = Producer(queue, app, clock=clock)
    runner = Runner(queue, app, RunnerConfig(monitor_interval_seconds=1.0), clock=clock)
    async with client(board) as http, running(runner):
        await clock.advance(1.5)  # the worker has published zero counts
        first = (await http.get("/api/overview")).json()
        first_at = clock.monotonic()
        await producer.dispatch_many(job, [True] * 6 + [False] * 2)
        await clock.run_until(lambda: runner.stats().failed == 2, step=0.1, limit=30)
        await clock.advance(1.5)  # a monitor interval: the new counts are published
        second = (await http.get("/api/overview")).json()
        elapsed = clock.monotonic() - first_at

    [worker] = second["workers"]
    assert (worker["succeeded"], worker["failed"]) == (6, 2)
    assert first["throughput"] == []  # one sample: no rate yet
    [point] = second["throughput"]
    assert point["completed_per_second"] == pytest.approx(6 / elapsed)
    assert point["failed_per_second"] == pytest.approx(2 / elapsed)


@pytest.mark.parametrize("name", [".", ".."])
def test_build_dashboard_refuses_a_path_step_for_a_queue_name(name: str) -> None:
    # /queues/.. would resolve to / in the browser: such a queue could not be shown.
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        build_dashboard("memory://", ["jobs", name])
