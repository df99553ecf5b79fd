"""PostgreSQL-only fixtures: every test here runs against the real server in a fresh schema."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chatkeep import Chatkeep


@pytest.fixture
def pg_url(pg_schema_url: str) -> str:
    """A SQLAlchemy URL whose search_path is a fresh schema (skips/fails without a server)."""
    return pg_schema_url


@pytest.fixture
def pg_keep(pg_url: str) -> Iterator[Callable[..., Chatkeep]]:
    """Factory for ``Chatkeep`` on the test schema (closed afterwards)."""
    made: list[Chatkeep] = []

    def factory(**kwargs: Any) -> Chatkeep:
        keep = Chatkeep(pg_url, **kwargs)
        made.append(keep)
        return keep

    yield factory
    for keep in made:
        keep.close()

