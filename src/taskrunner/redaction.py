"""Masking passwords in URLs and in any text that may show them.

Backends, the command line and the log formatters all use it, so a password never
reaches output or a log, however it was written (``/``, ``?``, ``#``, ``@`` or ``:``
unencoded, percent-encoded, or echoed by a library outside its URL).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import quote, unquote

import msgspec

__all__ = ["MIN_SECRET_CHARS", "mask_secrets", "mask_url", "url_secrets"]

# The user information of a URL inside any text: from "scheme://" to the last "@" before
# white space, a quote or an angle bracket (a password may hold "/", "?", "#", "@").
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s'\"<>]*)@")
# Characters that end the authority of a URL; a user name containing one is suspect.
_URL_DELIMITERS = "/?#"

#: Passwords shorter than this are masked inside URLs only (see `url_secrets`).
MIN_SECRET_CHARS = 4


def mask_url(url: str) -> str:
    """`url` with its password replaced by ``***`` (a plain user name is kept).

    Conservative, since URLs are typed by hand: the user information is everything
    between ``://`` and the *last* ``@`` (a password may contain ``/``, ``?``, ``#``,
    ``@`` or ``:`` that were not percent-encoded). Everything after the first ``:`` of
    it is masked; a user name that contains ``/``, ``?`` or ``#`` is masked too. With
    no ``@``, a "port" that is not a number is masked (a password whose host was
    forgotten). Text without ``://`` loses everything before its last ``@``. Never
    raises.
    """
    head, sep, rest = url.partition("://")
    if not sep:
        _, at, after = url.rpartition("@")
        return f"***@{after}" if at else url
    userinfo, at, after = rest.rpartition("@")
    if at:
        return f"{head}://{_mask_userinfo(userinfo)}@{after}"
    return f"{head}://{_mask_port(rest)}"


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
    """The password of `url` as written, percent-decoded and percent-encoded.

    For masking text that may show the password outside a URL (a library echoing
    part of a malformed one); it is the part `mask_url` masks. Forms shorter than
    `MIN_SECRET_CHARS` are left out: replacing every ``ab`` in a log would hide more
    than it protects, and inside URLs such passwords are masked anyway.
    """
    _, sep, rest = url.partition("://")
    userinfo, at, _ = (rest if sep else url).rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if any(c in user for c in _URL_DELIMITERS):
            secret = userinfo
        elif colon:
            secret = password
        else:
            return ()
    else:
        suspect = _suspect_port(rest) if sep else None
        if suspect is None:
            return ()
        secret = suspect[1]
    forms = {secret, unquote(secret), quote(unquote(secret), safe="")}
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
    """`text` with every URL password and every string in `secrets` replaced by ``***``.

    A URL here is ``scheme://`` up to the next white space, quote or angle bracket;
    its user information ends at its last ``@`` and is masked as `mask_url` masks it.
    `secrets` (from `url_secrets`) catch a password wherever else it shows up.
    """
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{_mask_userinfo(m['userinfo'])}@", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
