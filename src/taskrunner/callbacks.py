"""Calling user callbacks (failed-task handlers, hooks) without blocking the loop.

Internal module.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["call_callback"]


async def call_callback(callback: Callable[[Any], Any], argument: object) -> None:
    """Call `callback(argument)`: awaited when it is async, in a thread when it is not.

    A plain function may block, so it runs off the event loop and cannot stall the
    workers. Whatever the callback raises propagates.
    """
    if inspect.iscoroutinefunction(callback):
        await callback(argument)
        return
    result = await asyncio.to_thread(callback, argument)
    if inspect.isawaitable(result):
        await result
