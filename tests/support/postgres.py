"""A throwaway PostgreSQL schema, for tests and benchmarks that must not touch ``public``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

PG_URL = os.environ.get("CHATKEEP_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
"""The test server (``CHATKEEP_TEST_PG_URL`` overrides it): one definition, which
``tests/conftest.py`` and helpers read (a helper must not import ``conftest`` by name:
several folders have one)."""


def with_driver(url: str, driver: str | None) -> str:
    """``url`` naming ``driver`` (``"asyncpg"``: ``postgresql+asyncpg://...``), or no
    driver at all for ``None`` (a libpq DSN)."""
    scheme, sep, rest = url.partition("://")
    backend = scheme.split("+")[0]
    return f"{backend}+{driver}{sep}{rest}" if driver else f"{backend}{sep}{rest}"


@contextmanager
def scratch_schema(url: str, prefix: str = "ck") -> Iterator[str]:
    """Create a fresh schema and yield a SQLAlchemy URL whose ``search_path`` is that
    schema; drop it (ending any session still using it) on exit. Needs psycopg."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    dsn = with_driver(url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND query LIKE %s", (f"%{schema}%",))
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
