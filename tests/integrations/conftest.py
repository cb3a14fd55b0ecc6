"""The PostgreSQL tests' per-test schema, for the examples that use PostgreSQL."""

from __future__ import annotations

from tests.postgres.conftest import postgres_schema

__all__ = ["postgres_schema"]
