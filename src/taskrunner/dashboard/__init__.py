"""``taskrunner dashboard``: a web view of the queues (extra ``taskrunner-queue[dashboard]``).

An optional part: the core never imports it, and Starlette, uvicorn and Jinja2 are
imported only here. See docs/dashboard.md for the pages, the JSON API under ``/api/``
and the safety rules (read-only unless ``--allow-actions``; actions need the token
and a CSRF value; 127.0.0.1 by default; URLs masked; every value escaped).
"""

from __future__ import annotations

from taskrunner.dashboard.data import QueueSet, Sampler
from taskrunner.dashboard.security import Guard
from taskrunner.dashboard.web import Dashboard, create_app

__all__ = ["Dashboard", "Guard", "QueueSet", "Sampler", "create_app"]
