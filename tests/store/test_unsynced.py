"""Transactions whose commit does not wait for the disk (``transaction(synced=False)``):
what records a request before it leaves (its replay manifest, and the call's quota
reservation with it). On SQLite the connection runs at NORMAL for that transaction only
and is set back after (or never pooled again); on PostgreSQL ``synchronous_commit`` is
off for that transaction only; the Core path keeps PostgreSQL's setting too."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from chatkeep import Chatkeep, Ref
from chatkeep.store import direct
from chatkeep.store.executor import CoreTransport, Executor
from chatkeep.store.quotas import Boarding

ORG = Ref("organization", 31)


def setting(ex: Executor, dialect: str) -> str:
    """The sync setting this executor's transaction runs under."""
    if dialect == "postgresql":
        return str(ex.rows(text("SHOW synchronous_commit"), {})[0][0])
    return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[int(
        ex.rows(text("PRAGMA synchronous"), {})[0][0])]


@pytest.mark.sync_api
def test_the_manifest_and_its_reservation_commit_unsynced_and_nothing_else_does(
        keep: Chatkeep, monkeypatch: pytest.MonkeyPatch) -> None:
    repository = keep.repository
    transport = repository._transport
    dialect = transport.dialect
    keep.quotas.set(ORG, tokens=10_000)
    session = keep.sessions.create(ORG)
    session.add_user("Where is my parcel?")
    seen: list[str] = []
    if dialect == "postgresql":
        # One statement in autocommit writes both; run here inside a transaction of the
        # test's, it shows what it set for its own transaction (set_config, local).
        @contextmanager
        def observed() -> Iterator[Executor]:
            with transport.transaction() as ex:
                yield ex
                seen.append(setting(ex, dialect))

        monkeypatch.setattr(transport, "autocommit", observed)
    else:
        write = Boarding.write

        def spy(self: Boarding, ex: Executor) -> None:
            seen.append(setting(ex, dialect))
            write(self, ex)

        monkeypatch.setattr(Boarding, "write", spy)
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=100)
    assert history.info.reservation is not None
    assert keep.quotas.get(ORG).reserved > 0  # type: ignore[union-attr]
    assert seen == (["off"] if dialect == "postgresql" else ["NORMAL"])
    monkeypatch.undo()
    with transport.transaction() as ex:  # the next one syncs as configured
        assert setting(ex, dialect) == ("on" if dialect == "postgresql" else "FULL")


def test_a_sqlite_connection_is_set_back_to_its_level(tmp_path: Path) -> None:
    keep = Chatkeep(f"sqlite:///{tmp_path / 'k.db'}", dispatcher="inline",
                    config={"store": {"sqlite_synchronous": "EXTRA"}})
    statements: list[str] = []

    @event.listens_for(keep.engine, "connect")
    def trace(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.set_trace_callback(statements.append)

    keep.engine.dispose()  # connections made from now on are traced
    session = keep.sessions.create(ORG)
    session.add_user("Hello")
    keep.compressor.build_history(session, "Be brief.")
    around = [s for s in statements if s.startswith(("PRAGMA synchronous", "BEGIN IMMEDIATE",
                                                      "COMMIT"))]
    at = around.index("PRAGMA synchronous=NORMAL")
    assert around[at:at + 4] == ["PRAGMA synchronous=NORMAL", "BEGIN IMMEDIATE", "COMMIT",
                                 "PRAGMA synchronous=3"]
    assert around.count("PRAGMA synchronous=NORMAL") == 1  # the appends sync as configured
    assert "PRAGMA synchronous" not in statements  # the level is known, not asked
    with keep.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 3


class _Refusing(direct._DriverExecutor):
    """A driver connection whose setting cannot be set back."""

    __slots__ = ("commands",)

    def __init__(self) -> None:
        super().__init__(None, None)  # type: ignore[arg-type]
        self.commands: list[str] = []

    @property
    def in_transaction(self) -> bool:
        return False

    def fetch(self, sql: str, params: Any) -> list[Any]:
        return [(2,)]

    def command(self, sql: str) -> None:
        self.commands.append(sql)
        if sql == "PRAGMA synchronous=2":
            raise sqlite3.OperationalError("disk I/O error")


def test_a_connection_that_cannot_be_set_back_is_never_pooled_again() -> None:
    db = _Refusing()
    with pytest.raises(sqlite3.OperationalError), \
            direct._unsynced(db, "sqlite", "BEGIN IMMEDIATE"):
        pass
    assert db.commands == ["PRAGMA synchronous=NORMAL", "BEGIN IMMEDIATE", "COMMIT",
                           "PRAGMA synchronous=2"]
    assert db.unsafe  # _checkout invalidates it instead of pooling it


def test_a_failed_unsynced_transaction_rolls_back_and_sets_back(tmp_path: Path) -> None:
    keep = Chatkeep(f"sqlite:///{tmp_path / 'k.db'}", dispatcher="inline")
    transport = keep.repository._transport
    session = keep.sessions.create(ORG)
    with pytest.raises(RuntimeError), transport.transaction(synced=False) as ex:
        ex.rows(text("INSERT INTO chat_replay_texts (session_id, tenant_type, tenant_id, "
                     "tenant_id_int, digest, body) VALUES (:s, 't', '1', 1, 'd', 'b') "
                     "RETURNING digest"), {"s": session.id})
        raise RuntimeError("boom")
    with transport.reading() as ex:
        assert ex.rows(text("SELECT count(*) FROM chat_replay_texts"), {})[0][0] == 0
        assert setting(ex, "sqlite") == "FULL"


@pytest.mark.sync_api
def test_the_core_path_turns_synchronous_commit_off_on_postgresql(
        make_keep: Any, db_url: str) -> None:
    keep = make_keep()
    core = CoreTransport(keep.engine)
    with core.transaction(synced=False) as ex:
        got = setting(ex, core.dialect)
    assert got == ("off" if core.dialect == "postgresql" else "FULL")


@pytest.mark.parametrize("level", ["NORMAL", "FULL", "EXTRA"])
def test_the_transport_knows_the_configured_level_under_both_apis(
        tmp_path: Path, level: str) -> None:
    """The level an unsynced transaction sets back is the engine's setting (sync, and the
    async API's engine), so it is not read first: under the async API a read is a trip
    to aiosqlite's thread."""
    from chatkeep.aio import AsyncChatkeep

    numbers = {"NORMAL": 1, "FULL": 2, "EXTRA": 3}
    config = {"store": {"sqlite_synchronous": level}}
    with Chatkeep(f"sqlite:///{tmp_path / 'k.db'}", dispatcher="inline", config=config) as keep:
        keep.start()
        assert keep.repository._transport.sqlite_level == numbers[level]

    async def scenario() -> int | None:
        async with AsyncChatkeep(f"sqlite:///{tmp_path / 'a.db'}", dispatcher="inline",
                                 config=config) as keep:
            core = await keep.core()
            return core.repository._transport.sqlite_level

    assert asyncio.run(scenario()) == numbers[level]
