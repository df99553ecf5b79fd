"""Migration 0013 on a database with data: the quota tables arrive (sessions and the
ledger untouched, reservations work at once) and leave on a downgrade."""

from __future__ import annotations

from typing import Any

from sqlalchemy import inspect

from chatkeep import Chatkeep, Ref, Usage
from chatkeep.store import make_engine, migrate

QUOTA_TABLES = {"chat_quotas", "chat_reservations"}


def test_0013_upgrades_a_database_with_data_and_downgrades(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate.upgrade(engine, "0012_lifecycle")
    assert not QUOTA_TABLES & set(inspect(engine).get_table_names())
    keep = Chatkeep(db_url, create_schema=False)
    session = keep.sessions.create(Ref("organization", 1), Ref("user", 2))
    session.add_user("stored before the upgrade")
    session.record_usage("chat", Usage(prompt_tokens=30, completion_tokens=12), "m")
    keep.close()

    migrate.upgrade(engine)
    assert set(inspect(engine).get_table_names()) >= QUOTA_TABLES
    keep = Chatkeep(db_url, create_schema=False)
    assert [m.content for m in keep.sessions.get(session.id, Ref("organization", 1))
            .read_messages()] == ["stored before the upgrade"]
    keep.quotas.set(Ref("organization", 1), tokens=100)
    held = keep.quotas.reserve(Ref("organization", 1), 60, actor=Ref("user", 2))
    assert held.id is not None and keep.quotas.settle(held.id, 42)
    assert keep.quotas.remaining(Ref("organization", 1)) == 58
    keep.close()

    migrate.downgrade(engine, "0012_lifecycle")
    assert not QUOTA_TABLES & set(inspect(engine).get_table_names())
    migrate.upgrade(engine)
    assert set(inspect(engine).get_table_names()) >= QUOTA_TABLES
    engine.dispose()


def _rowid_free(engine: Any) -> bool:
    with engine.connect() as conn:
        sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = "
                                   "'chat_reservations'").scalar_one()
    return "WITHOUT ROWID" in str(sql).upper()


def test_0018_and_0019_keep_the_reservations_in_flight_both_ways(db_url: str) -> None:
    """0018 drops the lease index, 0019 makes the table WITHOUT ROWID on SQLite: a
    reservation made before them settles after them, and one made after them survives the
    downgrade to 0017 and settles there."""
    org = Ref("organization", 1)
    engine = make_engine(db_url)
    migrate.upgrade(engine, "0017_partial_mark_index")
    keep = Chatkeep(db_url, create_schema=False)
    keep.quotas.set(org, tokens=1_000)
    before = keep.quotas.reserve(org, 100)
    keep.close()

    migrate.upgrade(engine)
    indexes = {i["name"] for i in inspect(engine).get_indexes("chat_reservations")}
    assert "ix_chat_reservations_lease" not in indexes
    if engine.dialect.name == "sqlite":
        assert _rowid_free(engine)
    keep = Chatkeep(db_url, create_schema=False)
    assert before.id is not None and keep.quotas.settle(before.id, 40)
    after = keep.quotas.reserve(org, 200)
    assert keep.quotas.remaining(org) == 1_000 - 40 - 200
    keep.close()

    migrate.downgrade(engine, "0017_partial_mark_index")
    indexes = {i["name"] for i in inspect(engine).get_indexes("chat_reservations")}
    assert "ix_chat_reservations_lease" in indexes
    if engine.dialect.name == "sqlite":
        assert not _rowid_free(engine)
    keep = Chatkeep(db_url, create_schema=False)
    assert after.id is not None and keep.quotas.settle(after.id, 150)
    assert keep.quotas.remaining(org) == 1_000 - 40 - 150
    keep.close()
    engine.dispose()
