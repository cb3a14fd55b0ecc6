"""The queue page reads only the start of each body: a 50 MB message costs what a small one does."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from taskrunner.codec import encode_envelope
from taskrunner.dashboard import Dashboard, QueueSet
from taskrunner.dashboard.data import PAYLOAD_PREVIEW, message_view
from taskrunner.dashboard.preview import PREVIEW_BYTES, envelope_start
from taskrunner.messages import Envelope
from taskrunner.queue import BrowsedMessage, Queue, browse_of, browse_takes_body_bytes
from taskrunner_backends.memory import open_from_url
from tests.dashboard.support import client, memory_url

LARGE = 50 * 1024 * 1024


def _body(task: str, payload: object, **fields: Any) -> bytes:
    envelope = Envelope(
        id="a" * 32,
        task=task,
        payload=msgspec.Raw(msgspec.json.encode(payload)),
        enqueued_at=1_700_000_000.5,
        **fields,
    )
    return encode_envelope(envelope, max_bytes=2 * LARGE)


class _Measuring:
    """Forwards to a queue; records each browse call's options and the body bytes returned."""

    def __init__(self, inner: Queue, calls: list[dict[str, Any]]) -> None:
        self._inner = inner
        self._calls = calls

    @property
    def browse(self) -> Any:
        part = browse_of(self._inner)
        assert part is not None
        calls = self._calls

        class Part:
            async def browse(self, state: Any, **options: Any) -> list[BrowsedMessage]:
                assert part is not None
                page = await part.browse(state, **options)
                calls.append({**options, "returned": sum(len(m.body) for m in page)})
                return page

        return Part()

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)


async def test_a_50_mb_message_is_listed_from_its_first_bytes() -> None:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    await queue.add([_body("t.big", "x" * LARGE), _body("t.small", {"n": 1})])
    calls: list[dict[str, Any]] = []

    async def opener(name: str) -> Queue:
        wrapped: Queue = _Measuring(await open_from_url(url, queue_name=name), calls)
        return wrapped

    board = Dashboard(queues=QueueSet(["jobs"], opener), url="memory://")
    async with client(board) as http:
        page = await http.get("/queues/jobs")
        api = (await http.get("/api/queues/jobs/messages")).json()
    await board.queues.aclose()

    assert page.status_code == 200
    assert "t.big" in page.text
    assert all(c["body_bytes"] == PREVIEW_BYTES for c in calls)
    # Two listings of the page and one of the API: two bodies each, cut.
    assert all(c["returned"] <= 2 * PREVIEW_BYTES for c in calls), calls
    big, small = api["messages"]
    assert (big["task"], big["task_id"]) == ("t.big", "a" * 32)
    assert big["payload"] == '"' + "x" * (PAYLOAD_PREVIEW - 1)
    assert big["payload_truncated"] is True
    assert big["body_bytes"] > LARGE
    assert (small["task"], small["payload"], small["payload_truncated"]) == (
        "t.small",
        '{"n":1}',
        False,
    )


async def test_a_browse_of_contract_2_0_is_called_without_body_bytes() -> None:
    queue = await open_from_url(memory_url(), queue_name="jobs")

    class Old:
        async def browse(
            self, state: Any, *, after: str | None = None, limit: int = 100
        ) -> list[BrowsedMessage]:
            return []

    class New:
        async def browse(self, state: Any, **options: Any) -> list[BrowsedMessage]:
            return []

    part = browse_of(queue)
    assert part is not None
    assert browse_takes_body_bytes(part)
    assert not browse_takes_body_bytes(Old())  # type: ignore[arg-type]  # a 2.0 part
    assert browse_takes_body_bytes(New())
    await queue.aclose()


@pytest.mark.parametrize("cut", [40, 60, 100, 300, 4096])
def test_a_cut_envelope_gives_its_task_and_the_start_of_its_payload(cut: int) -> None:
    body = _body("emails.send", {"to": "u@example.com", "note": "é" * 2000})
    start = envelope_start(body[:cut])
    task_at = body.index(b'"task"')
    if cut < task_at + len(b'"task":"emails.send",'):
        assert start is None
        return
    assert start is not None
    assert (start.task, start.task_id) == ("emails.send", "a" * 32)
    assert start.enqueued_at is None  # written after the payload
    assert start.payload_cut
    payload_at = body.index(b'"payload":') + len(b'"payload":')
    expected = body[payload_at:cut].decode("utf-8", errors="replace")
    assert start.payload == expected


def test_a_whole_envelope_read_as_a_start_gives_every_field() -> None:
    body = _body("t", [1, 2])
    start = envelope_start(body + b" ")
    assert start is not None
    assert (start.task, start.payload, start.payload_cut) == ("t", "[1,2]", False)
    assert start.enqueued_at == 1_700_000_000.5


@pytest.mark.parametrize(
    "prefix",
    [
        b"",
        b"not json at all",
        b"[1, 2, 3",
        b'{"v":2,"id":"x","task":"t","payload":1',
        b'{"v":1,"id":"x","task":7,"payload":1',
        b'{"v":1,"id":"x","payload":"the task comes la',
        b'{"v":1,"id":"x","task":"t.na',
        b"\xff\xfe\x00",
    ],
)
def test_what_is_no_envelope_start_is_none(prefix: bytes) -> None:
    assert envelope_start(prefix) is None


def test_a_cut_body_that_is_no_envelope_is_shown_by_its_size() -> None:
    message = BrowsedMessage(
        cursor="1", message_id="1", body=b"\x00" * 10, delivery_count=0, body_size=LARGE
    )
    view = message_view(message, now=0.0)
    assert (view.task, view.payload, view.body_bytes) == (None, None, LARGE)
