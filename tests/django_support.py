"""Django for the tests: the example project's settings, pointed at the test's database.

Django's settings are process-wide and set up once, so every test that needs Django
(tests/postgres/test_transactional.py, tests/integrations/test_django_example.py) goes
through `django_database`: the example project (examples/django_example) with its
default connection moved to the test's server and schema.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql


@contextmanager
def django_database(libpq_url: str, schema: str) -> Iterator[Any]:
    """Django's default connection on `libpq_url`, its tables in `schema` (created).

    Yields ``django.db.connection``; the example's tables are created in `schema`
    (``migrate --run-syncdb``). Afterwards the connections are closed and `schema` is
    dropped.
    """
    with psycopg.connect(libpq_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_example.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, connections
    from examples.django_example.settings import database_settings

    connections["default"].close()
    connections["default"].settings_dict.update(
        database_settings(libpq_url), OPTIONS={"options": f"-c search_path={schema}"}
    )
    try:
        call_command("migrate", run_syncdb=True, verbosity=0)
        yield connection
    finally:
        connections.close_all()
        with psycopg.connect(libpq_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
