"""examples/django_example through Django's test client, on the suite's PostgreSQL and Redis.

The view creates an order and dispatches its confirmation in one transaction: on a
PostgreSQL queue the job is written on Django's own connection (gone if the
transaction rolls back), on Redis it is sent by ``transaction.on_commit``. A real worker
(the management command, in burst mode) runs the ``def`` task, which uses the ORM.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

import taskrunner
from taskrunner_backends.postgres.testing import with_options
from tests.django_support import django_database

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def django_db(postgres_url: str, postgres_schema: str) -> Iterator[str]:
    """The example project on the test's server; yields the libpq URL."""
    libpq = postgres_url.split("?", 1)[0]
    with django_database(libpq, postgres_schema + "_shop"):
        yield libpq


@pytest.fixture
def queue_url(request: pytest.FixtureRequest, django_db: str, postgres_schema: str) -> str:
    return str(request.param(django_db, postgres_schema, request))


def _postgres_queue(libpq: str, schema: str, request: pytest.FixtureRequest) -> str:
    return with_options(libpq, schema=schema + "_q")


def _redis_queue(libpq: str, schema: str, request: pytest.FixtureRequest) -> str:
    redis_url = request.getfixturevalue("redis_url")
    namespace = request.getfixturevalue("redis_namespace")
    return f"{redis_url}?namespace={namespace}"


@pytest.fixture
def shop(queue_url: str) -> Iterator[Any]:
    """The example's settings pointed at `queue_url`, with a fresh producer; its client."""
    from django.conf import settings
    from django.test import Client
    from examples.django_example import client

    settings.TASKRUNNER = {**settings.TASKRUNNER, "url": queue_url}
    client._producer = None
    try:
        yield Client()
    finally:
        opened: taskrunner.SyncProducer | None = getattr(client, "_producer", None)
        if opened is not None:
            opened.close()
        client._producer = None


def _order(shop: Any, email: str) -> dict[str, Any]:
    answer = shop.post(
        "/orders", data=json.dumps({"email": email}), content_type="application/json"
    )
    assert answer.status_code == 201, answer.content
    body: dict[str, Any] = answer.json()
    return body


def _work() -> None:
    """``python manage.py taskrunner_worker --burst ...``, in this process."""
    from django.core.management import ManagementUtility

    argv = ["manage.py", "taskrunner_worker", "--burst", "--block-seconds", "0.2"]
    ManagementUtility(argv).execute()


@pytest.mark.parametrize(
    "queue_url",
    [
        pytest.param(_postgres_queue, id="postgres-queue"),
        pytest.param(_redis_queue, id="redis-queue", marks=pytest.mark.redis),
    ],
    indirect=True,
)
def test_an_order_placed_in_a_view_is_confirmed_by_the_worker(shop: Any, queue_url: str) -> None:
    placed = _order(shop, "ada@example.com")
    assert shop.get(f"/orders/{placed['order']}").json()["confirmed"] is False
    if queue_url.startswith("postgresql"):
        assert placed["job"] is not None, "the PostgreSQL queue takes the job in the transaction"

    _work()

    assert shop.get(f"/orders/{placed['order']}").json()["confirmed"] is True


@pytest.mark.parametrize(
    "queue_url", [pytest.param(_postgres_queue, id="postgres-queue")], indirect=True
)
def test_a_rolled_back_view_leaves_neither_order_nor_job(shop: Any, queue_url: str) -> None:
    from django.db import connection, transaction
    from examples.django_example.client import producer
    from examples.django_example.models import Order
    from examples.django_example.tasks import confirm_order

    class UndoError(Exception):
        pass

    def place_then_fail() -> None:
        with transaction.atomic():
            order = Order.objects.create(email="bob@example.com")
            producer().dispatch(confirm_order, order.id, connection=connection)
            raise UndoError

    with pytest.raises(UndoError):
        place_then_fail()
    assert Order.objects.count() == 0

    async def ready() -> int:
        async with taskrunner.open_queue(queue_url, "shop") as queue:
            return (await queue.stats()).ready

    assert asyncio.run(ready()) == 0


@pytest.mark.parametrize(
    "queue_url", [pytest.param(_postgres_queue, id="postgres-queue")], indirect=True
)
def test_dispatch_with_djangos_connection_outside_atomic_is_refused(
    shop: Any, queue_url: str
) -> None:
    from django.db import connection
    from examples.django_example.client import producer
    from examples.django_example.tasks import confirm_order

    from taskrunner_backends.postgres.transactional import TransactionError

    with pytest.raises(TransactionError, match="atomic"):
        producer().dispatch(confirm_order, 1, connection=connection)
