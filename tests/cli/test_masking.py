"""No password in any output: mask_url, log lines, error messages, every command.

Every password here is built from two fragments, ``S3CR`` and ``ET9X``, joined by a
character that URLs treat specially (or percent-encoded). The tests assert that
neither fragment appears anywhere, so a masker that stops at the special character
(and prints half the secret) fails as surely as one that masks nothing.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from taskrunner.logs import configure_logging
from taskrunner.redaction import mask_secrets, mask_url, register_secret_options, url_secrets
from tests.cli.conftest import Cli

APP = "tests.cli.apps:app"
FRAGMENTS = ("S3CR", "ET9X")
# An address nothing listens on: every command gets as far as connecting.
DOWN = "127.0.0.1:1"

PASSWORDS = [
    pytest.param("S3CR/ET9X+b64==", id="slash-base64"),
    pytest.param("S3CR?ET9X", id="question-mark"),
    pytest.param("S3CR#ET9X", id="hash"),
    pytest.param("S3CR@ET9X", id="at"),
    pytest.param("S3CR%2FET9X", id="percent-2F"),
    pytest.param("S3CR:ET9X", id="colon"),
    pytest.param("S3CR/ET9X?a#b@c", id="all-of-them"),
    pytest.param("S3CR ET9X", id="space"),
    pytest.param("S3CR'ET9X\"", id="quotes"),
]


def url_forms(password: str) -> list[str]:
    """The URL shapes a password can sit in: user+password, password only, TLS, socket."""
    return [
        f"redis://user:{password}@{DOWN}/0",
        f"redis://:{password}@{DOWN}/0",
        f"rediss://user:{password}@{DOWN}/0?ssl_cert_reqs=none",
        f"unix://:{password}@/tmp/taskrunner-no-such.sock?db=0",
        f"unix://user:{password}@/tmp/taskrunner-no-such.sock",
    ]


def assert_clean(text: str) -> None:
    for fragment in FRAGMENTS:
        assert fragment not in text, text


@pytest.mark.parametrize("password", PASSWORDS)
def test_mask_url_hides_every_part_of_the_password_in_every_form(password: str) -> None:
    for url in url_forms(password):
        masked = mask_url(url)

        assert_clean(masked)
        assert "***" in masked
        # What is not secret stays readable.
        assert masked.startswith(url.partition("://")[0] + "://")
        assert ("user:***@" in masked) == ("user:" in url)


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://u:ab/cd+ef==@host:6379/0", "redis://u:***@host:6379/0"),
        ("redis://:ab/cd@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://u:p?w@host/0?ssl_cert_reqs=none", "rediss://u:***@host/0?ssl_cert_reqs=none"),
        ("unix://:pw@/run/redis.sock?db=2", "unix://:***@/run/redis.sock?db=2"),
        ("redis://u:p@ss@host/0", "redis://u:***@host/0"),
        ("redis://u:a%2Fb@host/0", "redis://u:***@host/0"),
        # A user name alone is not a secret; one that swallowed a '/' may be.
        ("redis://alice@host/0", "redis://alice@host/0"),
        ("redis://ab/cd@host/0", "redis://***@host/0"),
        # No '@' but something that is not a port after the host's colon: a password
        # whose host part was forgotten, or cut off by an unencoded '/'.
        ("redis://u:secret", "redis://u:***"),
        ("redis://u:secret/0", "redis://u:***/0"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://[::1]:6379/0", "redis://[::1]:6379/0"),
        # Not a URL at all: whatever precedes an '@' goes.
        ("redis//u:secret@host", "***@host"),
        ("memory://", "memory://"),
    ],
)
def test_mask_url_keeps_what_is_not_secret(url: str, masked: str) -> None:
    assert mask_url(url) == masked


@pytest.mark.parametrize("password", PASSWORDS)
def test_mask_secrets_hides_urls_embedded_in_text(password: str) -> None:
    for url in url_forms(password):
        for text in (
            f"cannot connect to {url}: refused",
            f"queue=RedisStreamsQueue(server={url!r})",
            f'{{"url": "{url}"}}',
            f"<{url}>",
        ):
            assert_clean(mask_secrets(text, url_secrets(url)))


@pytest.mark.parametrize("password", PASSWORDS)
def test_url_secrets_name_the_password_as_written_decoded_and_encoded(password: str) -> None:
    secrets = url_secrets(f"redis://user:{password}@host/0")

    assert password in secrets
    assert unquote(password) in secrets
    assert quote(unquote(password), safe="") in secrets


def option_forms(password: str) -> list[str]:
    """A secret in a query option, for every built-in scheme (and the option names)."""
    secret = quote(password, safe="")
    return [
        f"redis://{DOWN}/0?password={secret}&bogus=2",
        f"rediss://{DOWN}/0?ssl_password={secret}&ssl_cert_reqs=none",
        f"unix:///tmp/taskrunner-no-such.sock?db=0&password={secret}",
        f"redis+cluster://{DOWN}?password={secret}&shards=2",
        f"rediss+cluster://{DOWN}?ssl_password={secret}",
        f"postgresql://app@{DOWN}/db?password={secret}&sslmode=disable",
        f"postgres://app@{DOWN}/db?sslpassword={secret}",
        f"memory://store?token={secret}",
        # Unencoded: the value runs up to the next "&name=", whatever it holds.
        f"redis://{DOWN}/0?password={password}&bogus=2",
        f"postgresql://app@{DOWN}/db?db_passphrase={password}",
    ]


@pytest.mark.parametrize("password", [*PASSWORDS, pytest.param("S3CR&ET9X", id="ampersand")])
def test_mask_url_hides_secret_query_options_of_every_scheme(password: str) -> None:
    for url in option_forms(password):
        masked = mask_url(url)

        assert_clean(masked)
        assert "=***" in masked
        # The options around it stay readable.
        assert masked.startswith(url.partition("?")[0]), masked
        assert ("&bogus=2" in masked) == ("&bogus=2" in url)


@pytest.mark.parametrize("password", PASSWORDS)
def test_secret_query_options_are_masked_in_text_and_found_by_url_secrets(password: str) -> None:
    for url in option_forms(password):
        secrets = url_secrets(url)
        value = url.partition("sword=")[2] or url.partition("token=")[2]
        echoed = unquote(value.partition("&")[0])

        assert_clean(mask_secrets(f"bad URL {url}: what is {echoed!r}?", secrets))


def test_a_backend_declares_its_own_secret_options() -> None:
    url = "thirdparty://host/?tenant=acme&signature=S3CRET9X"
    assert mask_url(url) == url

    register_secret_options("Signature")

    assert mask_url(url) == "thirdparty://host/?tenant=acme&signature=***"
    assert "S3CRET9X" in url_secrets(url)


@pytest.fixture
def root_handler() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if h.get_name() == "taskrunner.cli"]:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.usefixtures("root_handler")
@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("password", PASSWORDS)
def test_log_lines_never_show_the_password(password: str, log_format: str) -> None:
    url = f"redis://user:{password}@db:6379/0"
    stream = io.StringIO()
    configure_logging("info", log_format, stream=stream, secrets=url_secrets(url))  # type: ignore[arg-type]
    log = logging.getLogger("tests.cli.masking")

    log.info("connecting to %s", url)
    log.warning("server said: %r", f"AUTH {password} failed")
    try:
        raise ConnectionError(f"no route to {url}")
    except ConnectionError:
        log.exception("gave up")

    assert_clean(stream.getvalue())
    if log_format == "json":
        assert all(json.loads(line) for line in stream.getvalue().splitlines())


def commands(url: str) -> list[list[str]]:
    """Every command that takes --url, with what it needs to get to the backend."""
    return [
        ["worker", APP, "--url", url, "--burst"],
        ["enqueue", "cli.noop", "--app", APP, "--url", url],
        ["inspect", "--url", url],
        ["inspect", "--url", url, "--json"],
        ["dead-letters", "list", "--url", url],
        ["dead-letters", "show", "1-0", "--url", url],
        ["dead-letters", "retry", "--all", "--url", url],
        ["dead-letters", "purge", "--all", "--yes", "--url", url],
        ["demo", "--url", url, "--tasks", "1"],
        ["config", "--url", url],
        ["config", "--url", url, "--json"],
    ]


@pytest.mark.parametrize("password", PASSWORDS)
def test_no_command_prints_the_password_of_its_url(run: Cli, password: str) -> None:
    for url in url_forms(password) + url_forms(quote(password, safe="")):
        for argv in commands(url):
            result = run(*argv)

            assert_clean(result.out + result.err)
            assert "Traceback" not in result.err, argv
            assert result.code in (0, 1, 2), (argv, result.err)


@pytest.mark.parametrize("password", PASSWORDS)
def test_the_password_stays_hidden_from_the_environment_and_config_files(
    run: Cli, password: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"redis://user:{password}@{DOWN}/0"
    monkeypatch.setenv("TASKRUNNER_URL", url)
    from_env = [run("inspect"), run("config"), run("worker", APP, "--burst")]
    monkeypatch.delenv("TASKRUNNER_URL")
    (tmp_path / "worker.toml").write_text(f"url = {json.dumps(url)}\nnum_workers = 0\n")
    from_file = [
        run("inspect", "--config", "worker.toml"),
        run("config", "--config", "worker.toml"),
    ]

    for result in from_env + from_file:
        assert_clean(result.out + result.err)
        assert "Traceback" not in result.err


@pytest.mark.parametrize(
    "argv",
    [
        # A URL where a command expects something else, or after a misspelt flag.
        ["inspect", "redis://user:S3CR/ET9X@host/0"],
        ["inspect", "--ur=redis://user:S3CR/ET9X@host/0"],
        ["inspect", "--ur", "redis://user:S3CR@ET9X@host/0"],
        ["worker", APP, "--burst", "redis://:S3CR?ET9X@host/0"],
        ["dead-letters", "frobnicate", "redis://:S3CR#ET9X@host/0"],
        # A mistyped scheme separator is still a URL with a password.
        ["demo", "redis//user:S3CR/ET9X@host/0"],
        ["demo", "redis:/user:S3CR/ET9X@host/0"],
    ],
)
def test_usage_errors_mask_urls_on_the_command_line(run: Cli, argv: list[str]) -> None:
    result = run(*argv)

    assert result.code == 2
    assert_clean(result.err)


@pytest.mark.parametrize("url", option_forms("S3CR/ET9X"))
def test_commands_never_print_a_secret_query_option(run: Cli, url: str) -> None:
    for argv in (["inspect", "--url", url], ["config", "--url", url, "--json"]):
        result = run(*argv)

        assert_clean(result.out + result.err)
        assert "Traceback" not in result.err, argv
        assert result.code in (0, 1, 2), (argv, result.err)


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:S3CR/ET9X@127.0.0.1:1/0",
        "redis://:S3CR?ET9X@127.0.0.1:1/0",
        "redis://:S3CR#ET9X@127.0.0.1:1/0",
        "unix://:S3CR/ET9X@/tmp/redis.sock",
    ],
)
def test_a_password_with_unencoded_url_characters_is_a_configuration_error(
    run: Cli, url: str
) -> None:
    result = run("inspect", "--url", url)

    assert result.code == 2, result.err
    assert "must be percent-encoded" in result.err
    assert "%2F" in result.err
    assert_clean(result.err)


def test_words_that_are_no_urls_are_not_taken_for_passwords(run: Cli) -> None:
    # An e-mail address has user@host too; only URLs (and --url's value) hold secrets.
    result = run("demo", "--url", "memory://", "reply-to: grace@example.com")

    assert result.code == 2
    assert "unrecognized arguments: reply-to: grace@example.com" in result.err
