"""Connections for the SQL modules: every database error surfaces as ``StoreError``.

Integrity errors pass through unchanged inside a transaction, so a caller that
expects one (a duplicate tool-call id) can turn it into a precise error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from chatkeep.errors import StoreError


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction; committed on success, rolled back on any error."""
    try:
        with engine.begin() as conn:
            yield conn
    except IntegrityError:
        raise
    except DBAPIError as exc:
        raise StoreError(f"database error: {exc.orig or exc}") from exc


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A connection for reads."""
    try:
        with engine.connect() as conn:
            yield conn
    except DBAPIError as exc:
        raise StoreError(f"database error: {exc.orig or exc}") from exc
