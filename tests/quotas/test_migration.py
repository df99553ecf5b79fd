"""Migration 0013 on a database with data: the quota tables arrive (sessions and the
ledger untouched, reservations work at once) and leave on a downgrade."""

from __future__ import annotations

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
