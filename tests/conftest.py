"""Shared pytest configuration: async tests run on a fresh event loop each."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

# Redis server discovery and per-test namespaces live in tests/redis_fixtures.py.
pytest_plugins = ["tests.redis_fixtures"]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests with `asyncio.run` (no plugin needed)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True
