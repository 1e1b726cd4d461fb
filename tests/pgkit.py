"""PostgreSQL for the tests: the server CI starts (.ci/run, scripts/pg-server), named by
MATRIX_SOURCES_TEST_POSTGRES; each test gets a schema of its own in it, dropped after.

Unset locally, the PostgreSQL half of each parametrized test is skipped, saying how to
set it; in CI (CI=true) an unset variable fails them instead: CI must never skip them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

ENV = "MATRIX_SOURCES_TEST_POSTGRES"
HOW = (
    f"{ENV} is unset: start one with `scripts/pg-server start /tmp/pg` and export "
    f"{ENV}=<the DSN it prints>"
)


def base_dsn() -> str:
    dsn = os.environ.get(ENV)
    if not dsn:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the PostgreSQL tests, but {HOW}", pytrace=False)
        pytest.skip(HOW)
    return dsn


def with_schema(dsn: str, schema: str) -> str:
    """The DSN whose sessions work in `schema` (libpq's options: search_path)."""
    return f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"


def admin(dsn: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def fresh_schema(prefix: str = "t") -> Iterator[str]:
    """A DSN on an empty schema of its own, dropped (with everything in it) after."""
    base = base_dsn()
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin(base, f"CREATE SCHEMA {schema}")
    try:
        yield with_schema(base, schema)
    finally:
        admin(base, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
