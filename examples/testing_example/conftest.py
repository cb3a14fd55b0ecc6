"""Fixtures of the example's tests (taskrunner's plugin brings the rest).

`taskrunner_queue`, `taskrunner_clock` and `dispatched` come from taskrunner's pytest
plugin. The hook below runs ``async def`` tests with `asyncio.run`; with pytest-asyncio
or anyio installed, use theirs instead.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

import taskrunner
from taskrunner.queue import Queue

from . import shop


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


@pytest.fixture(autouse=True)
def gateway(taskrunner_queue: Queue) -> Iterator[shop.Gateway]:
    """A fresh fake gateway, and the tasks dispatching onto the test's queue."""
    fresh = shop.Gateway()
    saved = shop.GATEWAY
    shop.GATEWAY = fresh
    shop.connect_producer(taskrunner.Producer(taskrunner_queue, shop.app))
    yield fresh
    shop.GATEWAY = saved
    shop._PRODUCER = None
