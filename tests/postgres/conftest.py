"""PostgreSQL-only fixtures: every test here runs against the real server in a fresh schema."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pg_workers import open_keep

from chatkeep import Chatkeep


@pytest.fixture
def pg_url(pg_schema_url: str) -> str:
    """A SQLAlchemy URL whose search_path is a fresh schema (skips/fails without a server)."""
    return pg_schema_url


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

