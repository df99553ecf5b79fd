"""Connections for the SQL modules: every database error surfaces as ``StoreError``.

Integrity errors pass through unchanged inside a transaction, so a caller that
expects one (a duplicate tool-call id) can turn it into a precise error. Reads
are marked read-only, so SQLite begins them deferred (a WAL snapshot) instead of
taking the write lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from chatkeep.errors import StoreError
from chatkeep.store.engine import READ_ONLY


def store_error(exc: SQLAlchemyError) -> StoreError:
    """One line saying what the database refused (the driver's message, not SQLAlchemy's
    wrapper with the statement and a link)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        detail = str(exc.orig).strip().splitlines()
        return StoreError(f"database error: {type(exc.orig).__name__}: "
                          f"{detail[0] if detail else ''}".rstrip(": "))
    return StoreError(f"database error: {type(exc).__name__}: {exc}")


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction; committed on success, rolled back on any error."""
    try:
        with engine.begin() as conn:
            yield conn
    except IntegrityError:
        raise
    except SQLAlchemyError as exc:
        raise store_error(exc) from exc


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A connection for reads."""
    try:
        with engine.connect() as conn:
            yield conn.execution_options(**{READ_ONLY: True})
    except SQLAlchemyError as exc:
        raise store_error(exc) from exc
