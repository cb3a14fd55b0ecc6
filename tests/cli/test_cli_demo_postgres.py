"""``taskrunner demo`` on PostgreSQL, run as a user runs it: a subprocess, a fresh schema."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

pytestmark = pytest.mark.postgres


@pytest.fixture
def fresh_schema(postgres_url: str) -> Iterator[str]:
    """A schema name nobody created yet; dropped after the test."""
    name = f"tr_demo_{secrets.token_hex(4)}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _row_counts(postgres_url: str, schema: str) -> dict[str, int]:
    """Rows in every table of `schema` but the migration log."""
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=10) as conn:
        tables = [
            str(name)
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
                " AND table_name <> 'schema_migrations' ORDER BY table_name",
                (schema,),
            ).fetchall()
        ]
        counts: dict[str, int] = {}
        for table in tables:
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.{}").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            ).fetchone()
            counts[table] = int(row[0]) if row is not None else -1
        return counts


def test_the_demo_runs_on_a_fresh_schema_and_leaves_no_row_behind(
    postgres_url: str, fresh_schema: str, tmp_path: Path
) -> None:
    separator = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{separator}schema={fresh_schema}"
    # The developer's settings must not leak in (the checkout's pyproject neither: cwd).
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKRUNNER_")}
    argv = [sys.executable, "-m", "taskrunner", "demo", "--url", url]
    argv += ["--tasks", "200", "--num-workers", "16"]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=90, check=False, cwd=tmp_path, env=env
    )

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "dispatched 200 tasks to 'demo-" in done.stdout
    assert "processed      200" in done.stdout
    dead = [line.split()[-1] for line in done.stdout.splitlines() if "  dead-lettered" in line]
    assert dead, done.stdout
    assert int(dead[-1]) > 0, done.stdout
    # The demo dead-letters some tasks on purpose, so an empty dead_letters table shows
    # the clean-up ran; the demo migrated the fresh schema itself (migrate=auto), so
    # these are the tables it used.
    counts = _row_counts(postgres_url, fresh_schema)
    assert {"messages", "dead_letters", "workers", "leaders", "results"} <= set(counts)
    assert counts == dict.fromkeys(counts, 0)
