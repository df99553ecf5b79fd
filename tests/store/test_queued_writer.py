"""SQLite write transactions of one engine queue on an in-process lock
(chatkeep.store.engine.QueuedWriter): a second thread's write waits for the first to
commit instead of meeting SQLite's busy handler, and the lock is let go however the
transaction ends."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from chatkeep.store.direct import SqliteTransport
from chatkeep.store.engine import make_engine

pytestmark = pytest.mark.sync_api


def impatient_engine(path: Path) -> Engine:
    """An engine whose connections give up at once on SQLite's lock (busy_timeout 0):
    a write meeting another connection's would fail with 'database is locked'."""
    engine = make_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _no_wait(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=0")

    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE probe (id INTEGER PRIMARY KEY)"))
    return engine


def ids(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return sorted(r[0] for r in conn.execute(text("SELECT id FROM probe")))


@pytest.mark.parametrize("path", ["core", "driver"])
def test_a_second_writer_waits_for_the_first_to_commit(tmp_path: Path, path: str) -> None:
    engine = impatient_engine(tmp_path / "queued.db")
    transport = SqliteTransport(engine)
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def write(row_id: int, hold: bool) -> None:
        try:
            if path == "core":
                with engine.begin() as conn:
                    conn.execute(text("INSERT INTO probe VALUES (:i)"), {"i": row_id})
                    if hold:
                        holding.set()
                        assert release.wait(30)
            else:
                with transport.transaction() as ex:
                    ex.many(text("INSERT INTO probe VALUES (:i)"), [{"i": row_id}])
                    if hold:
                        holding.set()
                        assert release.wait(30)
        except BaseException as exc:
            errors.append(exc)

    first = threading.Thread(target=write, args=(1, True))
    first.start()
    assert holding.wait(30)
    second = threading.Thread(target=write, args=(2, False))
    second.start()
    # Without the queue the second write fails at once on SQLite's lock (busy_timeout 0);
    # give it the time to, then let the first commit.
    second.join(0.3)
    release.set()
    first.join(30)
    second.join(30)
    assert errors == []
    assert ids(engine) == [1, 2]
    engine.dispose()


def test_the_lock_is_let_go_after_a_rollback_and_a_failed_statement(tmp_path: Path) -> None:
    engine = impatient_engine(tmp_path / "released.db")
    transport = SqliteTransport(engine)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(text("INSERT INTO probe VALUES (1)"))
        raise RuntimeError("rolled back")
    with pytest.raises(sqlite3.IntegrityError), transport.transaction() as ex:
        ex.many(text("INSERT INTO probe VALUES (:i)"), [{"i": 2}])
        ex.many(text("INSERT INTO probe VALUES (:i)"), [{"i": 2}])
    done = threading.Event()

    def other_thread() -> None:  # would wait for a lock left held (then time out)
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO probe VALUES (3)"))
        done.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join(30)
    assert done.is_set()
    assert ids(engine) == [3]
    engine.dispose()


def test_sqlites_own_lock_still_guards_other_connections(tmp_path: Path) -> None:
    """A connection of another engine (another process, in effect) is not in the queue:
    SQLite's lock refuses its write while this engine's is open."""
    engine = impatient_engine(tmp_path / "shared.db")
    other = sqlite3.connect(tmp_path / "shared.db", timeout=0, isolation_level=None)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO probe VALUES (1)"))
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO probe VALUES (2)")
        other.execute("COMMIT")
    finally:
        other.close()
    assert ids(engine) == [1, 2]
    engine.dispose()
