"""Migration 0012 on a database with data: the ledger stops cascading on the session
(a deleted session leaves its usage), and the lifecycle tables arrive and leave."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import inspect

from chatkeep import Chatkeep, Ref, Usage
from chatkeep.store import make_engine, migrate

LIFECYCLE_TABLES = {"chat_holds", "chat_retention", "chat_erasures", "chat_erased_items",
                    "chat_lifecycle_log"}


def test_0012_keeps_the_ledger_when_a_session_row_goes(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate.upgrade(engine, "0011_fold_history")
    assert not LIFECYCLE_TABLES & set(inspect(engine).get_table_names())
    keep = Chatkeep(db_url, create_schema=False)
    session = keep.sessions.create(Ref("organization", 1), Ref("user", 2))
    session.add_user("billed before the upgrade")
    session.record_usage("chat", Usage(prompt_tokens=30, completion_tokens=12), "m")
    keep.close()

    migrate.upgrade(engine)
    assert set(inspect(engine).get_table_names()) >= LIFECYCLE_TABLES
    usage = sa.table("chat_usage", sa.column("session_id"), sa.column("prompt_tokens"))
    sessions = sa.table("chat_sessions", sa.column("id"))
    with engine.begin() as conn:  # the old cascade would take the ledger with the row
        conn.execute(sa.delete(sessions).where(sessions.c.id == session.id))
    with engine.connect() as conn:
        assert conn.execute(sa.select(usage.c.prompt_tokens)).scalars().all() == [30]
    keep = Chatkeep(db_url, create_schema=False)
    [line] = keep.usage(Ref("organization", 1))
    assert (line.prompt_tokens, line.completion_tokens) == (30, 12)
    keep.close()

    migrate.downgrade(engine, "0011_fold_history")
    assert not LIFECYCLE_TABLES & set(inspect(engine).get_table_names())
    migrate.upgrade(engine)
    assert set(inspect(engine).get_table_names()) >= LIFECYCLE_TABLES
    engine.dispose()
