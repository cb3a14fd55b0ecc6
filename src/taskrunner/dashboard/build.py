"""Building a `Dashboard` for a backend URL (the CLI and the demo share it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from taskrunner.app import App
from taskrunner.backends import check_url, connect
from taskrunner.dashboard.data import QueueSet, Sampler
from taskrunner.dashboard.security import Guard
from taskrunner.dashboard.web import LOOPBACK_HOSTS, Dashboard
from taskrunner.names import check_queue_name
from taskrunner.queue import Queue
from taskrunner.redaction import mask_url

__all__ = ["build_dashboard"]


def build_dashboard(
    url: str,
    names: Sequence[str],
    *,
    app: App | None = None,
    guard: Guard | None = None,
    actions: bool = True,
    completed_source: Callable[[], int] | None = None,
    loopback_only: bool = True,
    discover: bool = False,
) -> Dashboard:
    """A dashboard of queues `names` on `url`, its URL masked for display.

    Queues are opened on first view and closed when the server stops. With
    `loopback_only` it answers only requests addressed to a loopback host name. With
    `discover` it shows the backend's own list of queues where the backend can give
    one (asked through a handle of ``names[0]``), else `names`. With a `guard`,
    reading needs sign-in; `actions` then offers retry and purge to signed-in browsers.

    Raises:
        ConfigurationError: The URL is malformed or its scheme unknown, or a name is
            no queue name (checked now, not at the first page view).
    """
    check_url(url)
    for name in names:
        check_queue_name(name)

    async def opener(name: str) -> Queue:
        return await connect(url, name)

    return Dashboard(
        queues=QueueSet(names, opener),
        url=mask_url(url),
        app=app,
        guard=guard,
        actions=actions,
        sampler=Sampler(completed_source=completed_source),
        allowed_hosts=LOOPBACK_HOSTS if loopback_only else None,
        discover_probe=names[0] if discover and names else None,
    )
