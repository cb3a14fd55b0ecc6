"""The backend's RESP packer writes exactly what redis-py's would (no server needed)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from hypothesis import given, strategies as st

from taskrunner_backends.redis.client import Arg, pack_commands

_ARGS = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=32),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
)


def _redis_py(commands: list[tuple[Arg, ...]]) -> bytes:
    connection = aioredis.Redis().connection_pool.make_connection()  # type: ignore[no-untyped-call]
    return b"".join(connection.pack_commands(commands))


# redis-py treats the command name specially (splits it on spaces), so it is fixed here.
_COMMANDS = st.lists(_ARGS, max_size=8).map(lambda args: ("EVALSHA", *args))


@given(st.lists(_COMMANDS, min_size=1, max_size=5))
def test_same_bytes_as_redis_py(commands: list[tuple[Arg, ...]]) -> None:
    assert pack_commands(commands) == _redis_py(commands)


def test_large_binary_values_are_packed_whole() -> None:
    body = bytes(range(256)) * 1000
    commands: list[tuple[Arg, ...]] = [("XADD", "s", "*", "b", body)]

    assert pack_commands(commands) == _redis_py(commands)


@pytest.mark.parametrize("bad", [True, None, [1], 1j])
def test_other_types_are_refused(bad: object) -> None:
    with pytest.raises(TypeError):
        pack_commands([("SET", "k", bad)])  # type: ignore[list-item]
