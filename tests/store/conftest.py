"""PostgreSQL-only fixtures: every test here runs against the real server in a fresh schema;
a test marked ``pgbouncer`` also through PgBouncer in transaction mode (``pg_url``
parametrised: ``postgresql`` and ``pgbouncer``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pg_workers import open_keep

from chatkeep import Chatkeep

ROUTES = ("postgresql", "pgbouncer")
"""How a test marked ``pgbouncer`` reaches the server: directly, and through PgBouncer."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``pg_url`` of a test marked ``pgbouncer`` takes each route (others: direct only)."""
    if "pg_url" in metafunc.fixturenames \
            and metafunc.definition.get_closest_marker("pgbouncer") is not None:
        metafunc.parametrize("pg_url", ROUTES, indirect=True)


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    """A SQLAlchemy URL whose search_path is a fresh schema (skips/fails without a server):
    on the server itself, or (param ``pgbouncer``) through PgBouncer in transaction mode
    with ``?prepared_statements=false``."""
    route = getattr(request, "param", "postgresql")
    fixture = "pgbouncer_schema_url" if route == "pgbouncer" else "pg_schema_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
def pg_keep(pg_url: str, api: str) -> Iterator[Callable[..., Chatkeep]]:
    """Factory for ``Chatkeep`` on the test schema (closed afterwards); on the ``async``
    axis the sync API driven through ``AsyncChatkeep`` (see tests/conftest.py)."""
    made: list[Any] = []

    def factory(**kwargs: Any) -> Chatkeep:
        keep = open_keep(pg_url, api, **kwargs)
        made.append(keep)
        return keep

    yield factory
    for keep in made:
        keep.close()

