"""Open a store so that nothing can write to it: the database itself refuses.

SQLite: the file is opened with ``mode=ro`` (the operating system's handle is read-only)
and ``PRAGMA query_only``; every transaction begins deferred (a WAL snapshot that never
takes the write lock, so the application's writers are never held up). PostgreSQL: each
connection is ``SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY``, so any write the
server is asked for fails. On both, every connection carries the store's
``READ_ONLY`` execution option. The facade on top is built with ``create_schema=False``
and checked against the migrations chatkeep ships (a read must not run against a schema
it does not know).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import SQLAlchemyError

from chatkeep.app import Chatkeep
from chatkeep.config import Config
from chatkeep.errors import StoreError
from chatkeep.memory.embedders import Embedder
from chatkeep.store import migrate
from chatkeep.store.connections import store_error
from chatkeep.store.engine import (
    READ_ONLY,
    SQLITE_BUSY_TIMEOUT_MS,
    describe_url,
    make_engine,
    parse_url,
    sqlite_path,
)


def read_only_engine(url: str, config: Config) -> Engine:
    """An engine on ``url`` whose connections cannot write (see the module docstring).
    A SQLite URL must name a file that exists; anything unusable is a ``StoreError``."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = sqlite_path(parsed)
        if path is None:
            raise StoreError(f"{describe_url(parsed)}: the inspector reads a SQLite file "
                             "(sqlite:///file.db), not an in-memory database")
        if not path.is_file():
            raise StoreError(f"no database at {path} ({describe_url(parsed)})")
        uri = f"{path.resolve().as_uri()}?mode=ro"
        engine = create_engine(
            "sqlite+pysqlite:///" + uri + "&uri=true",
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000,
                          "check_same_thread": False})
        _sqlite_read_only(engine)
    else:
        engine = make_engine(parsed, prepared_statements=config.store.prepared_statements)
        _postgres_read_only(engine)
    return engine.execution_options(**{READ_ONLY: True})


def _sqlite_read_only(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # chatkeep issues its own BEGIN
        cursor = dbapi_connection.cursor()
        for pragma in (f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}", "query_only=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.connection.driver_connection.execute("BEGIN")  # deferred: a snapshot


def _postgres_read_only(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        if not getattr(dbapi_connection, "autocommit", True):
            dbapi_connection.commit()


def open_read_only(url: str, config: Config, *, embedder: Embedder | None = None) -> Chatkeep:
    """The facade over :func:`read_only_engine`, its schema checked: ``StoreError`` when the
    database cannot be opened or has no chatkeep schema of a known revision. ``embedder``:
    the one recall's vector ranks use (default: ``memory.embedding_model``'s)."""
    engine = read_only_engine(url, config)
    keep = Chatkeep(engine, config=config, create_schema=False, dispatcher="inline",
                    embedder=embedder)
    try:
        keep.start()
        revision = migrate.check_current(keep.engine)
    except SQLAlchemyError as exc:
        keep.close()
        raise store_error(exc) from exc
    except BaseException:
        keep.close()
        raise
    if revision is None:
        keep.close()
        raise StoreError(f"{describe_url(url)} has no chatkeep schema: run `chatkeep db "
                         "upgrade --db ...` first")
    return keep
