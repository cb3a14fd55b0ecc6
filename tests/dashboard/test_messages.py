"""The queue page's lists of waiting and in-flight messages, and their JSON route, on memory."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from taskrunner.app import App
from taskrunner.dashboard import Dashboard, QueueSet
from taskrunner.dashboard.data import MESSAGES_SHOWN
from taskrunner.producer import Producer
from taskrunner.queue import BROWSE_LIMIT, BrowsedMessage, Capabilities, Queue
from taskrunner_backends.memory import open_from_url
from tests.dashboard.support import client, dashboard, memory_url

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"


async def _dispatch(queue: Queue, payloads: list[Any], *, task: str = "t.echo") -> list[str]:
    app = App("jobs")

    @app.task(name=task)
    def echo(value: object) -> None: ...

    return await Producer(queue, app).dispatch_many(task, payloads)


async def _pages(http: Any, state: str, limit: int) -> list[list[dict[str, Any]]]:
    """Every page of `state`, following next_after (bounded)."""
    pages: list[list[dict[str, Any]]] = []
    after = ""
    for _ in range(50):
        body = (
            await http.get(f"/api/queues/jobs/messages?state={state}&limit={limit}&after={after}")
        ).json()
        pages.append(body["messages"])
        if body["next_after"] is None:
            return pages
        after = body["next_after"]
    raise AssertionError("the listing never ended")


async def test_waiting_messages_are_paged_by_cursor_with_their_task_names() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    ids = await _dispatch(queue, [{"n": i} for i in range(7)])
    await queue.receive("c1", max_messages=2, wait_seconds=0, lease_seconds=30)
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        pages = await _pages(http, "waiting", 3)
        [in_flight] = await _pages(http, "in_flight", 3)
    await board.queues.aclose()

    assert [len(p) for p in pages] == [3, 2]
    listed = [m["id"] for p in pages for m in p]
    assert listed == ids[2:]  # the memory backend lists them in add order, once each
    assert {m["task"] for p in pages for m in p} == {"t.echo"}
    assert [m["delivery_count"] for p in pages for m in p] == [0] * 5
    assert pages[0][0]["payload"] == '{"n":2}'
    assert [(m["id"], m["owner"], m["delivery_count"]) for m in in_flight] == [
        (ids[0], "c1", 1),
        (ids[1], "c1", 1),
    ]
    assert all(0 < m["lease_remaining_seconds"] <= 30 for m in in_flight)
    assert all(m["owner"] is None for p in pages for m in p)


async def test_listing_changes_no_delivery_count_and_takes_no_lease() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    ids = await _dispatch(queue, [1, 2, 3])
    [held] = await queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=30)
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        for _ in range(3):
            assert (await http.get("/queues/jobs")).status_code == 200
            await _pages(http, "waiting", 1)
            await _pages(http, "in_flight", 1)
    await board.queues.aclose()

    assert await queue.heartbeat([held]) == []
    rest = await queue.receive("c2", max_messages=10, wait_seconds=0, lease_seconds=30)
    assert [(d.message_id, d.delivery_count) for d in rest] == [(ids[1], 1), (ids[2], 1)]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("state=ready", "state must be"),
        ("limit=0", "limit must be"),
        (f"limit={BROWSE_LIMIT + 1}", "limit must be"),
        ("limit=x", "limit must be"),
        ("after=not-a-cursor", "after must be"),
    ],
)
async def test_a_bad_listing_parameter_is_a_400_naming_it(query: str, named: str) -> None:
    board = dashboard(memory_url(), ["jobs"])
    async with client(board) as http:
        api = await http.get(f"/api/queues/jobs/messages?{query}")
        page = await http.get(f"/queues/jobs?{query.replace('after', 'waiting_after')}")
    await board.queues.aclose()

    assert api.status_code == 400
    assert named in api.json()["error"]
    if not query.startswith("state"):
        assert page.status_code == 400


async def test_the_queue_page_lists_both_and_escapes_payloads_and_task_names() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    await _dispatch(queue, [{"html": HOSTILE}], task="t.<b>bold</b>")
    await queue.add([b"\xff<b>raw</b>"])
    await _dispatch(queue, [{"held": HOSTILE}], task="t.<b>bold</b>")
    await queue.receive("c<i>1</i>", max_messages=1, wait_seconds=0, lease_seconds=30)
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        page = await http.get("/queues/jobs")
        api = (await http.get("/api/queues/jobs/messages")).json()
    await board.queues.aclose()

    html = page.text
    assert page.status_code == 200
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert "<b>bold" not in html
    assert "<i>1" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "t.&lt;b&gt;bold&lt;/b&gt;" in html
    assert "c&lt;i&gt;1&lt;/i&gt;" in html  # the in-flight owner
    assert "(not a taskrunner message)" in html
    assert f"Showing at most {MESSAGES_SHOWN} per page" in html
    # The API gives the text as it is; the raw body is no envelope.
    assert [m["task"] for m in api["messages"]] == [None, "t.<b>bold</b>"]
    assert HOSTILE in api["messages"][1]["payload"]


async def test_the_next_page_link_follows_the_cursor_and_keeps_the_other_list() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    ids = await _dispatch(queue, [{"n": i} for i in range(5)])
    await queue.receive("c1", max_messages=3, wait_seconds=0, lease_seconds=30)
    board = dashboard(url, ["jobs"])
    async with client(board) as http:
        first = await http.get("/queues/jobs?limit=1&in_flight_after=" + ids[0])
        href = _next_link(first.text, "Waiting")
        second = await http.get(href)
    await board.queues.aclose()

    assert f'<th scope="row">{ids[3]}</th>' in first.text
    assert f'<th scope="row">{ids[4]}</th>' not in first.text
    assert f"waiting_after={ids[3]}" in href
    assert f"in_flight_after={ids[0]}" in href  # the in-flight list stays on its page
    assert f'<th scope="row">{ids[4]}</th>' in second.text
    assert f'<th scope="row">{ids[1]}</th>' in second.text  # in flight after ids[0]
    assert f'<th scope="row">{ids[0]}</th>' not in second.text
    assert _next_link(second.text, "Waiting") == ""  # the last page has no next link


def _next_link(html: str, label: str) -> str:
    """The href of the visible Next page link of the `label` message pages, or ""."""
    nav = html.split(f'aria-label="{label} message pages"', 1)[1].split("</nav>", 1)[0]
    link = nav.split('class="next" href="', 1)[1]
    href, rest = link.split('"', 1)
    return "" if rest.startswith(" hidden") else href.replace("&amp;", "&")


class _NoBrowse:
    """A memory queue that does not claim browse (as a backend without the part)."""

    def __init__(self, inner: Queue) -> None:
        self._inner = inner

    @property
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(self._inner.capabilities, browse=False)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)


async def test_a_backend_without_browse_says_so_instead_of_listing() -> None:
    url = memory_url()

    async def opener(name: str) -> Queue:
        wrapped: Queue = _NoBrowse(await open_from_url(url, queue_name=name))
        return wrapped

    board = Dashboard(queues=QueueSet(["jobs"], opener), url="memory://")
    async with client(board) as http:
        api = (await http.get("/api/queues/jobs/messages")).json()
        page = await http.get("/queues/jobs")
    await board.queues.aclose()

    assert (api["supported"], api["messages"], api["next_after"]) == (False, [], None)
    assert page.status_code == 200
    assert "cannot list its messages one by one" in page.text


class _Recording:
    """Forwards to a queue and records each browse call's state and limit."""

    def __init__(self, inner: Queue, calls: list[tuple[str, int]]) -> None:
        self._inner = inner
        self._calls = calls

    @property
    def browse(self) -> Any:
        part = self._inner.browse  # type: ignore[attr-defined]
        calls = self._calls

        class Part:
            async def browse(
                self, state: str, *, after: str | None = None, limit: int = 100
            ) -> list[BrowsedMessage]:
                calls.append((state, limit))
                result: list[BrowsedMessage] = await part.browse(state, after=after, limit=limit)
                return result

        return Part()

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)


async def test_a_page_of_a_long_queue_reads_one_page_and_one_more_message_per_list() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    await queue.add([b"m"] * 5000)
    calls: list[tuple[str, int]] = []

    async def opener(name: str) -> Queue:
        wrapped: Queue = _Recording(await open_from_url(url, queue_name=name), calls)
        return wrapped

    board = Dashboard(queues=QueueSet(["jobs"], opener), url="memory://")
    async with client(board) as http:
        page = await http.get("/queues/jobs")
        api = (await http.get(f"/api/queues/jobs/messages?limit={BROWSE_LIMIT}")).json()
    await board.queues.aclose()

    assert page.status_code == 200
    assert calls == [
        ("waiting", MESSAGES_SHOWN + 1),
        ("in_flight", MESSAGES_SHOWN + 1),
        ("waiting", BROWSE_LIMIT),
    ]
    assert page.text.count('<tr><th scope="row">') == MESSAGES_SHOWN
    assert len(api["messages"]) == BROWSE_LIMIT
    assert api["next_after"] == api["messages"][-1]["cursor"]
