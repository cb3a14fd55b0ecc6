"""The dashboard's Starlette application: HTML pages and the JSON API under ``/api/``.

Pages are rendered on the server by Jinja2 with autoescaping on, so a payload, reason
or queue name holding HTML is shown as text; a small script (no build step) refreshes
the overview from ``/api/overview`` every `REFRESH_SECONDS`.
"""

from __future__ import annotations

import contextlib
import secrets
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jinja2
import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from taskrunner.app import App
from taskrunner.clock import Clock, SystemClock
from taskrunner.dashboard.data import (
    DEAD_LETTERS_SHOWN,
    MESSAGES_SHOWN,
    NAMES_EVERY_SECONDS,
    NAMES_SHOWN,
    PAGE_SIZE,
    WORKERS_SHOWN,
    QueueRow,
    QueueSet,
    Sampler,
    UnknownQueueError,
    WorkerRow,
    dead_letter_view,
    message_view,
    page_bounds,
    queue_row,
)
from taskrunner.dashboard.headers import SecurityHeadersMiddleware
from taskrunner.dashboard.preview import PREVIEW_BYTES
from taskrunner.dashboard.security import SESSION_COOKIE, Guard
from taskrunner.dashboard.signin import SignInMiddleware, safe_next
from taskrunner.errors import BackendError
from taskrunner.producer import Producer
from taskrunner.queue import BROWSE_LIMIT, BrowseState, browse_of, browse_takes_body_bytes
from taskrunner.scheduler import schedule_overview

__all__ = ["LOOPBACK_HOSTS", "REFRESH_SECONDS", "Dashboard", "create_app"]

REFRESH_SECONDS = 2.0
# Host header values of a dashboard bound to a loopback address.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
# Done messages kept for their redirect; older ones are dropped (never shown).
FLASHES_KEPT = 64
# Consumers listed on a queue page.
CONSUMERS_SHOWN = 100
_HERE = Path(__file__).parent


@dataclass
class Dashboard:
    """What the application serves.

    Attributes:
        queues: The queues shown (opened lazily, closed when the app shuts down).
        url: The backend URL, already masked (never shown with its password).
        app: The App, for its queue, task names and periodic schedules.
        guard: The token, its sessions and the CSRF check. When set, every page and
            API answer needs a session (or the token as a Bearer header on the API; see
            `taskrunner.dashboard.signin`). None: anyone who reaches the dashboard reads
            it, and no action is offered.
        actions: With a `guard`: retry and purge are offered to signed-in browsers
            (``--allow-actions``); False: signed-in browsers only read.
        sampler: The throughput samples.
        clock: Wall time of ages.
        allowed_hosts: Host header values served (None: any). A loopback dashboard
            lists only loopback names, so a page of another site that rebinds its DNS
            name to 127.0.0.1 cannot read it.
        discover_probe: When set, the queues shown are the backend's own list (read
            through a handle of this queue, again every `NAMES_EVERY_SECONDS` on the
            overview's refreshes), where the backend can list them; else `queues`'
            names as given.
    """

    queues: QueueSet
    url: str
    app: App | None = None
    guard: Guard | None = None
    actions: bool = True
    sampler: Sampler = field(default_factory=Sampler)
    clock: Clock = field(default_factory=SystemClock)
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_HOSTS
    discover_probe: str | None = None
    # What the last discovery found: None before one; "listed" / "cannot" / an error.
    names_note: dict[str, Any] | None = None
    names_read_at: float | None = None
    # Messages of done actions, by the key their redirect carries (shown once).
    flashes: OrderedDict[str, str] = field(default_factory=OrderedDict)


class _BadRequestError(Exception):
    pass


def _page(request: Request, name: str = "page") -> int:
    text = request.query_params.get(name, "1")
    try:
        page = int(text)
    except ValueError:
        raise _BadRequestError(f"{name} must be a whole number, got {text[:40]!r}") from None
    if page < 1:
        raise _BadRequestError(f"{name} must be 1 or more, got {page}")
    return page


# The dashboard's forms are a few short fields; a larger body is refused unread.
_MAX_FORM_BYTES = 8192


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded form of `request` (first value of each field).

    Parsed here rather than by Starlette's parser, which needs python-multipart.
    """
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM_BYTES:
            raise _BadRequestError(f"form larger than {_MAX_FORM_BYTES} bytes")
    fields = urllib.parse.parse_qs(body.decode("utf-8", errors="replace"))
    return {key: values[0] for key, values in fields.items()}


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _lease_left(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0:
        # Lapsed but not reclaimed yet: the holder may still heartbeat it back.
        return f"lapsed {_age(-seconds)} ago"
    return _age(seconds)


def _when(moment: float | None) -> str:
    if moment is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(moment))


def create_app(dashboard: Dashboard) -> Starlette:
    """The ASGI application serving `dashboard`; its handles close at shutdown.

    Guarantees: one overview refresh (HTML or ``/api/overview``, ``/api/queues``)
    calls `Queue.stats` once per queue of the page asked for and for no other queue;
    no route lists more than a fixed cap of anything (queues `PAGE_SIZE` per page,
    workers, consumers and dead letters capped, and the cap is said on the page);
    with a `Guard`, nothing but the sign-in page and its stylesheet is served without
    a live session (the API also takes the token as a Bearer header); every action is
    refused unless the dashboard has a `Guard` and ``actions``, and the session cookie
    and the CSRF value match it.
    """
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_HERE / "templates"), autoescape=True)
    env.filters["age"] = _age
    env.filters["when"] = _when
    env.filters["lease_left"] = _lease_left
    templates = Jinja2Templates(env=env)
    d = dashboard

    def signed_in(request: Request) -> bool:
        cookie = request.cookies.get(SESSION_COOKIE)
        return d.guard is not None and d.guard.signed_in(cookie, d.clock.monotonic())

    def acts() -> bool:
        return d.guard is not None and d.actions

    def render(request: Request, template: str, code: int = 200, /, **context: Any) -> Response:
        is_signed_in = signed_in(request)
        base = {
            "url": d.url,
            "actions": acts(),
            "sign_in_offered": d.guard is not None,
            "signed_in": is_signed_in,
            "can_act": acts() and is_signed_in,
            "csrf": "" if d.guard is None else d.guard.csrf,
            "refresh_ms": int(REFRESH_SECONDS * 1000),
            "has_schedules": d.app is not None and bool(d.app.schedules),
        }
        return templates.TemplateResponse(request, template, {**base, **context}, status_code=code)

    def problem(request: Request, status: int, message: str) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status)
        return render(request, "problem.html", status, message=message)

    def guarded(
        handler: Callable[[Request], Any],
    ) -> Callable[[Request], Any]:
        async def wrapped(request: Request) -> Response:
            try:
                if "name" in request.path_params:
                    # A queue's page may be the first request (a bookmark): its name
                    # must be known without the overview having been loaded.
                    await discover()
                response: Response = await handler(request)
            except _BadRequestError as exc:
                return problem(request, 400, str(exc))
            except UnknownQueueError as exc:
                return problem(request, 404, f"no queue {exc.args[0]!r} on this dashboard")
            except BackendError as exc:
                return problem(request, 502, f"backend error: {type(exc).__name__}: {exc}")
            return response

        return wrapped

    async def discover() -> None:
        """Read the backend's queue names when due (at most every NAMES_EVERY_SECONDS)."""
        if d.discover_probe is None:
            return
        now = d.clock.monotonic()
        if d.names_read_at is not None and now - d.names_read_at < NAMES_EVERY_SECONDS:
            return
        d.names_read_at = now
        try:
            listing = await d.queues.discover(d.discover_probe, limit=NAMES_SHOWN)
        except BackendError as exc:
            d.names_note = {"state": "error", "error": f"{type(exc).__name__}: {exc}"}
            return
        if listing is None:
            d.names_note = {"state": "cannot", "probe": d.discover_probe}
        else:
            d.names_note = {"state": "listed", "complete": listing.complete, "cap": NAMES_SHOWN}

    async def overview_data(request: Request) -> dict[str, Any]:
        page = _page(request)
        await discover()
        # A filter on names costs the backend nothing: only the page's queues are read.
        wanted = request.query_params.get("filter", "").strip()[:100]
        names = [n for n in d.queues.names if wanted.lower() in n.lower()]
        start, stop, pages = page_bounds(len(names), page, PAGE_SIZE)
        now = d.clock.time()
        rows: list[QueueRow] = []
        workers: list[WorkerRow] = []
        for name in names[start:stop]:
            try:
                queue = await d.queues.get(name)
            except BackendError as exc:
                # Not reachable to open: shown on its row, like a failed stats call.
                rows.append(QueueRow(name=name, error=f"{type(exc).__name__}: {exc}"))
                continue
            row, live, _ = await queue_row(name, queue, now)
            rows.append(row)
            workers.extend(live)
        d.sampler.record(rows, workers)
        timed = [(w.average_seconds, w.workers) for w in workers if w.average_seconds is not None]
        weight = sum(n for _, n in timed)
        return {
            "queues": [msgspec.to_builtins(r) for r in rows],
            "page": min(page, pages),
            "pages": pages,
            "page_size": PAGE_SIZE,
            "total_queues": len(names),
            "filter": wanted,
            "discovered": d.names_note,
            "workers": [msgspec.to_builtins(w) for w in workers[:WORKERS_SHOWN]],
            "workers_total": len(workers),
            "workers_shown_cap": WORKERS_SHOWN,
            "average_task_seconds": sum(s * n for s, n in timed) / weight if weight else None,
            "throughput": d.sampler.series(),
        }

    @guarded
    async def api_queues(request: Request) -> Response:
        data = await overview_data(request)
        keys = ("queues", "page", "pages", "page_size", "total_queues", "filter", "discovered")
        return JSONResponse({k: data[k] for k in keys})

    @guarded
    async def api_overview(request: Request) -> Response:
        return JSONResponse(await overview_data(request))

    @guarded
    async def overview(request: Request) -> Response:
        return render(request, "overview.html", data=await overview_data(request))

    async def queue_data(request: Request) -> dict[str, Any]:
        name = request.path_params["name"]
        queue = await d.queues.get(name)
        now = d.clock.time()
        row, live, stats = await queue_row(name, queue, now)
        if stats is None:
            raise BackendError(row.error or "no stats")
        consumers = [msgspec.to_builtins(c) for c in stats.consumers[:CONSUMERS_SHOWN]]
        return {
            "queue": msgspec.to_builtins(row),
            "consumers": consumers,
            "consumers_total": len(stats.consumers),
            "consumers_shown_cap": CONSUMERS_SHOWN,
            "workers": [msgspec.to_builtins(w) for w in live[:WORKERS_SHOWN]],
            "lookup": queue.capabilities.lookup,
        }

    @guarded
    async def api_queue(request: Request) -> Response:
        return JSONResponse(await queue_data(request))

    @guarded
    async def queue_page(request: Request) -> Response:
        data = await queue_data(request)
        name = request.path_params["name"]
        message_id = request.query_params.get("id", "").strip()
        status = None
        if message_id:
            status = await status_of(name, message_id)
        _, limit = _browse_query(request)
        waiting = await messages_data(
            name, "waiting", request.query_params.get("waiting_after") or None, limit
        )
        in_flight = await messages_data(
            name, "in_flight", request.query_params.get("in_flight_after") or None, limit
        )
        return render(
            request,
            "queue.html",
            name=name,
            data=data,
            status=status,
            message_id=message_id,
            waiting=waiting,
            in_flight=in_flight,
        )

    async def status_of(name: str, message_id: str) -> dict[str, Any]:
        queue = await d.queues.get(name)
        app = d.app if d.app is not None and d.app.queue == name else App(name)
        try:
            found = await Producer(queue, app).status_many([message_id])
        except ValueError as exc:
            raise _BadRequestError(f"message id: {exc}") from None
        document: dict[str, Any] = msgspec.to_builtins(found[0])
        return document

    @guarded
    async def api_message(request: Request) -> Response:
        name = request.path_params["name"]
        return JSONResponse(await status_of(name, request.path_params["message_id"]))

    async def messages_data(
        name: str, state: BrowseState, after: str | None, limit: int
    ) -> dict[str, Any]:
        """One page of `state` messages: `limit` + 1 are read to know whether more follow."""
        queue = await d.queues.get(name)
        part = browse_of(queue) if queue.capabilities.browse else None
        document: dict[str, Any] = {
            "queue": name,
            "state": state,
            "supported": part is not None,
            "after": after,
            "limit": limit,
            "cap": BROWSE_LIMIT,
            "messages": [],
            "next_after": None,
        }
        if part is None:
            return document
        # Only the start of each body is read where the backend can cut it (contract
        # 2.1): the list shows PAYLOAD_PREVIEW characters, a message may be 50 MB.
        cut = {"body_bytes": PREVIEW_BYTES} if browse_takes_body_bytes(part) else {}
        try:
            page = await part.browse(state, after=after, limit=min(limit + 1, BROWSE_LIMIT), **cut)
        except ValueError as exc:
            raise _BadRequestError(str(exc)) from None
        # At the cap, a full page may be the last one: the next page is then empty.
        more = len(page) > limit or len(page) == limit == BROWSE_LIMIT
        page = page[:limit]
        now = d.clock.time()
        document["messages"] = [msgspec.to_builtins(message_view(m, now)) for m in page]
        document["next_after"] = page[-1].cursor if more and page else None
        return document

    def _browse_query(request: Request) -> tuple[str | None, int]:
        after = request.query_params.get("after") or None
        text = request.query_params.get("limit", str(MESSAGES_SHOWN))
        try:
            limit = int(text)
        except ValueError:
            raise _BadRequestError(f"limit must be a whole number, got {text[:40]!r}") from None
        if not 1 <= limit <= BROWSE_LIMIT:
            raise _BadRequestError(f"limit must be from 1 to {BROWSE_LIMIT}, got {limit}")
        return after, limit

    @guarded
    async def api_messages(request: Request) -> Response:
        state = request.query_params.get("state", "waiting")
        if state not in ("waiting", "in_flight"):
            raise _BadRequestError(f"state must be waiting or in_flight, got {state[:40]!r}")
        after, limit = _browse_query(request)
        name = request.path_params["name"]
        return JSONResponse(await messages_data(name, cast(BrowseState, state), after, limit))

    async def dead_data(request: Request) -> tuple[str, list[dict[str, Any]], bool]:
        name = request.path_params["name"]
        admin = (await d.queues.get(name)).admin
        if admin is None:
            return name, [], False
        letters = await admin.list_dead_letters(limit=DEAD_LETTERS_SHOWN)
        return name, [msgspec.to_builtins(dead_letter_view(x)) for x in letters], True

    @guarded
    async def api_dead(request: Request) -> Response:
        name, letters, supported = await dead_data(request)
        return JSONResponse(
            {
                "queue": name,
                "supported": supported,
                "dead_letters": letters,
                "cap": DEAD_LETTERS_SHOWN,
            }
        )

    @guarded
    async def dead_page(request: Request) -> Response:
        name, letters, supported = await dead_data(request)
        return render(
            request,
            "dead.html",
            name=name,
            letters=letters,
            supported=supported,
            cap=DEAD_LETTERS_SHOWN,
            # Looked up, never echoed: a link cannot make the page say something.
            done=d.flashes.pop(request.query_params.get("done", ""), ""),
        )

    @guarded
    async def dead_one(request: Request) -> Response:
        name, letters, _ = await dead_data(request)
        wanted = request.path_params["dead_id"]
        letter = next((x for x in letters if x["id"] == wanted), None)
        if letter is None:
            return problem(
                request,
                404,
                f"no dead letter {wanted!r} on queue {name!r} among the oldest "
                f"{DEAD_LETTERS_SHOWN}",
            )
        if request.url.path.startswith("/api/"):
            return JSONResponse(letter)
        return render(request, "dead_one.html", name=name, letter=letter)

    def refusal(request: Request) -> str | None:
        if not acts():
            return "read-only dashboard: start it with --allow-actions to retry or purge"
        if not signed_in(request):
            return "sign in with the dashboard token first"
        return None

    @guarded
    async def confirm(request: Request) -> Response:
        refused = refusal(request)
        if refused is not None:
            return problem(request, 403, refused)
        name = request.path_params["name"]
        await d.queues.get(name)
        action = request.query_params.get("action", "")
        target = request.query_params.get("id", "")
        if action not in ("retry", "purge") or not target:
            raise _BadRequestError("confirm needs action=retry|purge and id=ID or id=all")
        return render(request, "confirm.html", name=name, action=action, target=target)

    @guarded
    async def act(request: Request) -> Response:
        refused = refusal(request)
        if refused is not None:
            return problem(request, 403, refused)
        form = await _form(request)
        assert d.guard is not None
        if not d.guard.csrf_matches(form.get("csrf")):
            return problem(request, 403, "the form's CSRF value is missing or wrong: reload")
        name = request.path_params["name"]
        action, target = form.get("action"), form.get("id")
        if action not in ("retry", "purge") or not target:
            raise _BadRequestError("the action needs action=retry|purge and id=ID or id=all")
        admin = (await d.queues.get(name)).admin
        if admin is None:
            raise _BadRequestError(f"the backend of queue {name!r} has no dead-letter store")
        ids = None if target == "all" else [target]
        if action == "retry":
            count = len(await admin.retry_dead_letters(ids))
        else:
            count = await admin.purge_dead_letters(ids)
        key = f"{action}-{secrets.token_urlsafe(12)}"
        d.flashes[key] = f"{action}: {count} dead letter(s)"
        while len(d.flashes) > FLASHES_KEPT:
            d.flashes.popitem(last=False)
        return RedirectResponse(
            request.url_for("dead", name=name).include_query_params(done=key), status_code=303
        )

    async def schedules_data() -> dict[str, Any]:
        app = d.app
        if app is None or not app.schedules or app.queue not in d.queues:
            return {"schedules": [], "leadership": False, "leader": None}
        queue = await d.queues.get(app.queue)
        read = await schedule_overview(queue, list(app.schedules.values()), now=d.clock.time())
        return {
            "schedules": read.rows,
            "leadership": read.leadership,
            "leader": None if read.leader is None else read.leader.holder,
        }

    @guarded
    async def api_schedules(request: Request) -> Response:
        return JSONResponse(await schedules_data())

    @guarded
    async def schedules_page(request: Request) -> Response:
        return render(request, "schedules.html", data=await schedules_data())

    @guarded
    async def login(request: Request) -> Response:
        if d.guard is None:
            return problem(request, 403, "read-only dashboard: there is nothing to sign in to")
        if request.method == "GET":
            target = safe_next(request.query_params.get("next"))
            return render(request, "login.html", failed=False, next=target)
        form = await _form(request)
        given = form.get("token")
        target = safe_next(form.get("next"))
        if given is None or not d.guard.token_matches(given.strip()):
            return render(request, "login.html", 403, failed=True, next=target)
        # Back to the page that asked for the sign-in (a local path only).
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            d.guard.sign_in(d.clock.monotonic()),
            # A hint for the browser; the expiry that counts is the guard's.
            max_age=int(d.guard.session_seconds),
            httponly=True,
            samesite="strict",
            path="/",
        )
        return response

    @guarded
    async def logout(request: Request) -> Response:
        if d.guard is None:
            return problem(request, 403, "read-only dashboard: there is nothing to sign out of")
        form = await _form(request)
        # CSRF-checked like the actions: another site must not end the session either.
        if not d.guard.csrf_matches(form.get("csrf")):
            return problem(request, 403, "the form's CSRF value is missing or wrong: reload")
        d.guard.sign_out(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await d.queues.aclose()

    routes = [
        Route("/", overview, name="overview"),
        Route("/queues/{name}", queue_page, name="queue"),
        Route("/queues/{name}/dead", dead_page, name="dead"),
        Route("/queues/{name}/dead/confirm", confirm, name="confirm"),
        Route("/queues/{name}/dead/action", act, methods=["POST"], name="act"),
        Route("/queues/{name}/dead/{dead_id}", dead_one, name="dead_one"),
        Route("/schedules", schedules_page, name="schedules"),
        Route("/login", login, methods=["GET", "POST"], name="login"),
        Route("/logout", logout, methods=["POST"], name="logout"),
        Route("/api/queues", api_queues),
        Route("/api/overview", api_overview),
        Route("/api/queues/{name}", api_queue),
        Route("/api/queues/{name}/dead-letters", api_dead),
        Route("/api/queues/{name}/dead-letters/{dead_id}", dead_one),
        Route("/api/queues/{name}/messages", api_messages),
        Route("/api/queues/{name}/messages/{message_id}", api_message),
        Route("/api/schedules", api_schedules),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    # First: outermost, so a response of the host check or the sign-in check carries
    # the headers too.
    middleware = [Middleware(SecurityHeadersMiddleware)]
    if d.allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(d.allowed_hosts)))
    if d.guard is not None:
        middleware.append(Middleware(SignInMiddleware, guard=d.guard, clock=d.clock))
    return Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
