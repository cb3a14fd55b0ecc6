"""Secret-bearing backend URLs of every scheme and every secret form, on live servers.

Shared by the tests that enumerate where a URL is printed (tests/cli/test_secrets_everywhere.py,
tests/dashboard/test_dashboard_secrets.py). Every secret is built from the fragments
``S3CR`` and ``ET9X`` joined by a character URLs treat specially; `assert_clean` fails
when either fragment shows, so a masker that stops at the special character (and
prints half the secret) fails as surely as one that masks nothing.

A `Form` is where the secret sits: the password of the user information (with or
without a user name), or the value of a query option (``password``, ``sslpassword``,
``ssl_password``, a token, a passphrase, or ``vault_key``, the option the third-party
``vault://`` backend of tests/cli/vault_backend.py declares with
`taskrunner.redaction.register_secret_options`). A `Target` is a backend: memory,
vault (third-party), Redis (a throwaway server that wants passwords), the same server
by its Unix socket, TLS Redis (no server: an address refusing connections), Redis
Cluster and PostgreSQL. `Form.live` says whether the URL of a target opens the queue:
those cases check the normal output of a command that succeeded, not only its error.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, EntryPoints, entry_points as installed_entry_points
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pytest

from taskrunner import backends, redaction

FRAGMENTS = ("S3CR", "ET9X")

#: Passwords as the user means them (each is percent-encoded in the URL, unless a
#: `Form` says it is written raw).
PASSWORDS = {
    "slash-base64": "S3CR/ET9X+b64==",
    "question-mark": "S3CR?ET9X",
    "hash": "S3CR#ET9X",
    "at": "S3CR@ET9X",
    "percent-2F": "S3CR%2FET9X",
    "colon": "S3CR:ET9X",
    "all-of-them": "S3CR/ET9X?a#b@c",
    "space": "S3CR ET9X",
    "quotes": "S3CR'ET9X\"",
    "ampersand": "S3CR&ET9X",
    "backslash": "S3CR\\ET9X",
}

#: The user name every live Redis target accepts with any password (``nopass``).
REDIS_USER = "trsecrets"

#: The option the vault:// backend declares secret.
VAULT_OPTION = "vault_key"


@dataclass(frozen=True)
class Form:
    """Where the secret sits in the URL, and how it is written.

    Attributes:
        id: The test id.
        place: ``user`` (``user:SECRET@``), ``nouser`` (``:SECRET@``) or an option name.
        written: The secret as it appears in the URL.
    """

    id: str
    place: str
    written: str

    @property
    def encoded(self) -> bool:
        """Whether the secret is written percent-encoded (a URL that parses as meant)."""
        return quote(unquote(self.written), safe="") == self.written


def _forms() -> list[Form]:
    forms = [Form(f"user-{k}", "user", quote(v, safe="")) for k, v in PASSWORDS.items()]
    forms += [
        Form(f"nouser-{k}", "nouser", quote(v, safe=""))
        for k, v in PASSWORDS.items()
        if k in ("slash-base64", "quotes", "percent-2F")
    ]
    # Written raw: some still parse (":" ends no part), the others break the URL's
    # structure, so the secret lands in the host, path or query of what is parsed.
    forms += [
        Form(f"user-raw-{k}", "user", PASSWORDS[k])
        for k in ("colon", "slash-base64", "at", "percent-2F", "all-of-them", "quotes")
    ]
    secret = quote(PASSWORDS["slash-base64"], safe="")
    for option in ("password", "sslpassword", "ssl_password", "api_token", "sslkey_passphrase"):
        forms.append(Form(f"option-{option}", option, secret))
    forms.append(Form(f"option-{VAULT_OPTION}", VAULT_OPTION, secret))
    # Unencoded in the query: the value runs to the next "&name=", whatever it holds.
    forms.append(Form("option-password-raw-ampersand", "password", PASSWORDS["ampersand"]))
    forms.append(Form("option-password-raw-all", "password", PASSWORDS["all-of-them"]))
    return forms


FORMS = _forms()


def assert_clean(text: str, where: object = "") -> None:
    """Neither fragment of the secret is anywhere in `text`."""
    for fragment in FRAGMENTS:
        assert fragment not in text, f"{fragment!r} shown by {where}:\n{text}"


@dataclass
class Target:
    """A backend, and how a URL of it carries a secret.

    Attributes:
        scheme: The test id (and URL scheme).
        build: ``build(userinfo, options)``: the URL with ``userinfo`` (ending in ``@``,
            or empty) and the query options ``options`` (``name=value`` words).
        live_places: The `Form.place` values whose encoded forms open the queue.
        user: The user name of ``user`` forms.
    """

    scheme: str
    build: Callable[[str, list[str]], str]
    live_places: frozenset[str]
    user: str = REDIS_USER

    def url(self, form: Form) -> str:
        """The URL of this target with the secret of `form` in it."""
        if form.place == "user":
            return self.build(f"{self.user}:{form.written}@", [])
        if form.place == "nouser":
            return self.build(f":{form.written}@", [])
        return self.build("", [f"{form.place}={form.written}"])

    def live(self, form: Form) -> bool:
        """Whether the URL of `form` opens the queue (its commands succeed)."""
        return form.encoded and form.place in self.live_places


def _query(base: list[str], options: list[str]) -> str:
    words = base + options
    return f"?{'&'.join(words)}" if words else ""


def memory_target() -> Target:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    return Target(
        "memory",
        lambda userinfo, options: f"memory://{userinfo}{name}{_query([], options)}",
        frozenset({"user", "nouser"}),
    )


def vault_target() -> Target:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    return Target(
        "vault",
        lambda userinfo, options: f"vault://{userinfo}{name}{_query([], options)}",
        frozenset({"user", "nouser", VAULT_OPTION}),
    )


def redis_target(port: int, namespace: str) -> Target:
    return Target(
        "redis",
        lambda userinfo, options: (
            f"redis://{userinfo}127.0.0.1:{port}/0{_query([f'namespace={namespace}'], options)}"
        ),
        frozenset({"user", "nouser"}),
    )


def unix_target(socket: str, namespace: str) -> Target:
    return Target(
        "unix",
        lambda userinfo, options: (
            f"unix://{userinfo}{socket}{_query(['db=0', f'namespace={namespace}'], options)}"
        ),
        frozenset({"user", "nouser"}),
    )


def rediss_target() -> Target:
    # Nothing listens there: every command gets as far as connecting.
    return Target(
        "rediss",
        lambda userinfo, options: (
            f"rediss://{userinfo}127.0.0.1:1/0{_query(['ssl_cert_reqs=none'], options)}"
        ),
        frozenset(),
    )


def cluster_target(nodes: str, namespace: str) -> Target:
    # Only the named user: the shared cluster's default user keeps no password.
    return Target(
        "redis+cluster",
        lambda userinfo, options: (
            f"redis+cluster://{userinfo}{nodes}"
            f"{_query(['shards=3', f'namespace={namespace}'], options)}"
        ),
        frozenset({"user"}),
    )


def postgres_target(server_url: str, schema: str) -> Target:
    """On `server_url`'s server and database, in `schema`.

    The test servers trust their user with any password (a given URL without one).
    """
    parts = urlsplit(server_url)
    host = parts.netloc.rpartition("@")[2]
    base = [f"schema={schema}", *([parts.query] if parts.query else [])]
    return Target(
        "postgresql",
        lambda userinfo, options: (
            f"postgresql://{userinfo or (parts.username or 'postgres') + '@'}{host}{parts.path}"
            f"{_query(base, options)}"
        ),
        # A server that checks passwords refuses ours: then no form is live there.
        frozenset() if parts.password else frozenset({"user", "password", "sslpassword"}),
        user=parts.username or "postgres",
    )


@pytest.fixture
def vault_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed backends plus ``vault`` and ``broken`` (whose module raises
    RuntimeError when imported: tests/cli/broken_backend.py), as pip would add them.

    As in a fresh process, its module is not imported yet (nor its option declared),
    whatever earlier tests of this process did: the core must import it in time.
    """
    monkeypatch.delitem(sys.modules, "tests.cli.vault_backend", raising=False)
    monkeypatch.setattr(redaction, "_REGISTERED", redaction._REGISTERED - {VAULT_OPTION})
    group = backends.ENTRY_POINT_GROUP
    installed = list(installed_entry_points(group=group))
    added = [
        EntryPoint("vault", "tests.cli.vault_backend:open_from_url", group),
        EntryPoint("broken", "tests.cli.broken_backend:open_from_url", group),
    ]

    def entry_points(**selection: Any) -> EntryPoints:
        return EntryPoints([*installed, *added]).select(**selection)

    monkeypatch.setattr(backends, "entry_points", entry_points)


def every_password() -> Iterator[str]:
    """Every password a live server must accept: as meant, and as a raw form decodes."""
    for password in PASSWORDS.values():
        yield password
        yield unquote(password)


def grant(client: Any, user: str, *passwords: str) -> None:
    """Let `user` in with any of `passwords` (none: with any password), for everything."""
    rules = [f">{p}" for p in passwords] or ["nopass"]
    client.execute_command("ACL", "SETUSER", user, "on", "resetpass", *rules, "~*", "&*", "+@all")


@pytest.fixture(scope="module")
def secret_redis() -> Iterator[Any]:
    """A throwaway Redis (TCP and Unix socket) that wants a password.

    Its default user takes any of `every_password`, and `REDIS_USER` any password, so
    each secret form of the tests authenticates; stopped by pid afterwards.
    """
    import redis

    from tests.redis_fixtures import _server_kind
    from tests.servers import RedisServer, find_server_binary

    server = RedisServer(find_server_binary(_server_kind()), unixsocket=True)
    server.start()
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        try:
            grant(client, REDIS_USER)
            # Last: from here on, this client's connection is the only one let in unasked.
            grant(client, "default", *dict.fromkeys(every_password()))
        finally:
            client.close()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def secret_cluster() -> Iterator[str]:
    """The startup nodes (``host:port,...``) of the tests' Redis Cluster, where
    `REDIS_USER` is let in with any password (on every node; removed afterwards)."""
    import redis

    from taskrunner_backends.redis.testing import cluster_harness

    harness = cluster_harness()
    parts = urlsplit(harness.url)
    nodes = parts.netloc.rpartition("@")[2]
    host, _, port = nodes.split(",")[0].rpartition(":")
    username, password = parts.username, parts.password
    cluster = redis.RedisCluster(host=host, port=int(port), username=username, password=password)
    nodes_found = cluster.get_nodes()  # type: ignore[no-untyped-call]
    addresses = [(node.host, int(node.port)) for node in nodes_found]
    cluster.close()

    def each_node(action: Callable[[Any], None]) -> None:
        for node_host, node_port in addresses:
            client = redis.Redis(
                host=node_host, port=node_port, username=username, password=password
            )
            try:
                action(client)
            finally:
                client.close()

    each_node(lambda client: grant(client, REDIS_USER))
    try:
        yield nodes
    finally:
        each_node(lambda client: client.execute_command("ACL", "DELUSER", REDIS_USER))
