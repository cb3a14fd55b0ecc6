"""Masking passwords in URLs and in any text that may show them.

The one place that knows what in a URL is secret, for every scheme: the password of
the user information, and the value of every secret-bearing query option
(``?password=``, ``?sslpassword=``, key passphrases, tokens: see `is_secret_option`).
Backends, the command line, the dashboard and the log formatters all use it, so a
password never reaches output or a log, however it was written (``/``, ``?``, ``#``,
``@`` or ``:`` unencoded, percent-encoded, or echoed by a library outside its URL).

A backend whose URLs carry a secret under another option name declares it once, when
its module is imported (the module its entry point names)::

    from taskrunner.redaction import register_secret_options

    register_secret_options("api_key")
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from urllib.parse import quote, unquote, unquote_plus

import msgspec

__all__ = [
    "MIN_SECRET_CHARS",
    "SECRET_OPTION_WORDS",
    "is_secret_option",
    "mask_secrets",
    "mask_url",
    "register_secret_options",
    "url_secrets",
]

# A URL inside any text: from "scheme://" to the next white space, quote or angle bracket
# (a password may hold "/", "?", "#", "@": its user information ends at the last "@").
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")
# Where a query option's name starts: the value of the previous one runs up to the "&"
# before it, so an unencoded "&" or "#" inside a secret value is masked with it.
_OPTION_NAME = re.compile(r"(?:(?<=[?&])|^)(?P<name>[^&=#?]+)=")
# Characters that end the authority of a URL; a user name containing one is suspect.
_URL_DELIMITERS = "/?#"

#: Passwords shorter than this are masked inside URLs only (see `url_secrets`).
MIN_SECRET_CHARS = 4

#: A query option whose name contains one of these (any case) holds a secret: libpq's
#: ``password`` and ``sslpassword``, redis-py's ``password`` and ``ssl_password`` (the
#: key's passphrase), and the tokens and keys other backends take.
SECRET_OPTION_WORDS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "api_key")

# Further secret option names, declared by backends (`register_secret_options`).
_REGISTERED: set[str] = set()


def register_secret_options(*names: str) -> None:
    """Declare query options whose values `mask_url` and `url_secrets` must treat as secret.

    For a backend whose URLs carry a secret under a name without any of
    `SECRET_OPTION_WORDS` in it. Call it when the backend's module is imported; names
    compare without regard to case. Registering a name twice is harmless.
    """
    _REGISTERED.update(name.lower() for name in names)


def is_secret_option(name: str) -> bool:
    """Whether the URL query option `name` (as written, percent-encoded or not) is secret."""
    lowered = unquote(name).lower()
    return lowered in _REGISTERED or any(word in lowered for word in SECRET_OPTION_WORDS)


def mask_url(url: str) -> str:
    """`url` with its password and secret options replaced by ``***``.

    Any scheme. Conservative, since URLs are typed by hand: the user information is
    everything between ``://`` and the *last* ``@`` (a password may contain ``/``,
    ``?``, ``#``, ``@`` or ``:`` that were not percent-encoded). Everything after the
    first ``:`` of it is masked; a user name that contains ``/``, ``?`` or ``#`` is
    masked too (a plain user name is kept). With no ``@``, a "port" that is not a number
    is masked (a password whose host was forgotten). The value of every secret query
    option (`is_secret_option`) is masked up to the next ``&name=``. Text without
    ``://`` loses everything before its last ``@``. Never raises.
    """
    head, sep, rest = url.partition("://")
    # The query first: an unencoded "@" in a secret option's value is no userinfo's end.
    rest = _mask_query(rest if sep else url)
    if not sep:
        _, at, after = rest.rpartition("@")
        return f"***@{after}" if at else rest
    userinfo, at, after = rest.rpartition("@")
    if at:
        return f"{head}://{_mask_userinfo(userinfo)}@{after}"
    return f"{head}://{_mask_port(rest)}"


def _secret_values(rest: str) -> Iterator[tuple[int, int]]:
    """(start, end) in `rest` (a URL past its scheme) of each secret option's value."""
    query_start = rest.find("?") + 1
    if not query_start:
        return
    query = rest[query_start:]
    names = list(_OPTION_NAME.finditer(query))
    if not names:
        return
    ends = [following.start() - 1 for following in names[1:]] + [len(query)]
    for match, end in zip(names, ends, strict=True):
        if is_secret_option(match["name"]):
            yield query_start + match.end(), query_start + end


def _mask_query(rest: str) -> str:
    for start, end in reversed(list(_secret_values(rest))):
        rest = f"{rest[:start]}***{rest[end:]}"
    return rest


def _mask_userinfo(userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    if any(c in user for c in _URL_DELIMITERS):
        return "***"
    return f"{user}:***" if colon else user


def _mask_port(rest: str) -> str:
    suspect = _suspect_port(rest)
    if suspect is None:
        return rest
    host, _, tail = suspect
    return f"{host}:***{tail}"


def _suspect_port(rest: str) -> tuple[str, str, str] | None:
    """(host, port, rest) of ``host:port...`` (a URL without ``@``) if port is no number."""
    ends = [i for i in (rest.find(c) for c in _URL_DELIMITERS) if i >= 0]
    end = min(ends, default=len(rest))
    authority, tail = rest[:end], rest[end:]
    host, colon, port = authority.rpartition(":")
    if not colon or port.isdigit() or authority.endswith("]"):
        return None
    return host, port, tail


def url_secrets(url: str) -> tuple[str, ...]:
    """The password and secret option values of `url` as written, decoded and encoded.

    A secret option value with an unencoded ``&`` in it is also given in the pieces a
    query parser cuts it into.

    For masking text that may show them outside a URL (a library echoing part of a
    malformed one); they are the parts `mask_url` masks. Forms shorter than
    `MIN_SECRET_CHARS` are left out: replacing every ``ab`` in a log would hide more
    than it protects, and inside URLs such passwords are masked anyway.
    """
    _, sep, rest = url.partition("://")
    rest = rest if sep else url
    values = [rest[start:end] for start, end in _secret_values(rest)]
    # A value holding an unencoded "&" is cut there by every query parser, which may
    # then echo the pieces as option names ("unknown option(s) ET9X"): each is secret.
    secrets = values + [piece for value in values for piece in value.split("&")]
    masked = _mask_query(rest)
    userinfo, at, _ = masked.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if any(c in user for c in _URL_DELIMITERS):
            secrets.append(userinfo)
        elif colon:
            secrets.append(password)
    else:
        suspect = _suspect_port(masked) if sep else None
        if suspect is not None:
            secrets.append(suspect[1])
    forms = set(secrets)
    forms |= {decoded for f in secrets for decoded in (unquote(f), unquote_plus(f))}
    forms |= {quote(unquote(f), safe="") for f in secrets}
    # As repr() and JSON would show them inside a longer string.
    forms |= {_escaped(f, quote_char) for f in forms for quote_char in "'\""}
    forms |= {msgspec.json.encode(f).decode()[1:-1] for f in forms}
    return tuple(sorted((f for f in forms if len(f) >= MIN_SECRET_CHARS), key=len, reverse=True))


def _escaped(text: str, quote_char: str) -> str:
    """`text` as it shows inside a repr() delimited by `quote_char`."""
    inner = repr(text)[1:-1]
    if repr(text)[0] != quote_char:
        # repr chose the other delimiter: it escaped that one instead of ours.
        other = repr(text)[0]
        inner = inner.replace("\\" + other, other).replace(quote_char, "\\" + quote_char)
    return inner


def mask_secrets(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with every URL's secrets and every string in `secrets` replaced by ``***``.

    A URL here is ``scheme://`` up to the next white space, quote or angle bracket,
    masked as `mask_url` masks it. `secrets` (from `url_secrets`) catch a password
    wherever else it shows up.
    """
    # The secrets first: one holding a space would no longer be found whole once the
    # URL it cuts in two had its first half masked.
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _URL_IN_TEXT.sub(lambda m: mask_url(m[0]), text)
