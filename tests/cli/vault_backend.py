"""A "third-party" backend whose URLs carry a secret under a name of its own.

``vault://[user[:password]@]NAME?vault_key=KEY`` opens the memory store ``NAME``. The
option ``vault_key`` holds none of `taskrunner.redaction.SECRET_OPTION_WORDS`, so the
module declares it when imported, as the redaction module asks a backend to do. Like
many client libraries, it echoes the key it was given (in a debug log line), outside
any URL: the core must mask it there too, knowing it only from the declaration.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlsplit

from taskrunner.clock import Clock
from taskrunner.errors import ConfigurationError
from taskrunner.redaction import register_secret_options
from taskrunner_backends.memory import InMemoryQueue, open_from_url as open_memory

SECRET_OPTION = "vault_key"
#: The store name whose opening raises an unforeseen exception quoting the URL and key.
CRASHING = "crash"

register_secret_options(SECRET_OPTION)

_log = logging.getLogger("tests.cli.vault_backend")


async def open_from_url(url: str, *, queue_name: str, clock: Clock | None = None) -> InMemoryQueue:
    """The memory queue `queue_name` of store ``vault-NAME``; unknown options are refused.

    Store `CRASHING` raises RuntimeError (a bug of the backend).
    """
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - {SECRET_OPTION})
    if unknown:
        raise ConfigurationError(f"unknown vault:// option(s) {', '.join(unknown)}", setting="url")
    key = options.get(SECRET_OPTION)
    if parts.hostname == CRASHING:
        # A bug, not an error the backend foresaw: what reaches the user is a traceback.
        raise RuntimeError(f"vault client bug while opening {url} (key {key!r})")
    _log.debug("unlocking vault %s with key %s", parts.hostname, key)
    return await open_memory(f"memory://vault-{parts.hostname}", queue_name=queue_name, clock=clock)
