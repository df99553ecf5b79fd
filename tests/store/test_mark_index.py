"""The LangChain id's index is partial (migration 0017): only messages carrying the id
have an entry, and the lookup by id (``Repository.stored_marks``) still probes it, on
both stores; 0017 steps down to 0016's whole index and up again."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from chatkeep import Chatkeep, Ref
from chatkeep.messages import MessageDraft, Role
from chatkeep.sessions import prepare_batch
from chatkeep.store import make_engine, migrate
from chatkeep.store.schema import INDEXED_MARK, MARK_INDEX
from support import statements

ORG = Ref("organization", 1)


def _definition(engine: sa.Engine) -> str:
    """The index's DDL as the database keeps it."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            sql = conn.execute(sa.text("SELECT sql FROM sqlite_master WHERE name = :n"),
                               {"n": MARK_INDEX}).scalar_one()
        else:
            sql = conn.execute(sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = :n "
                                       "AND schemaname = current_schema()"),
                               {"n": MARK_INDEX}).scalar_one()
    return str(sql)


def _plan(engine: sa.Engine, sql: str, params: Any) -> str:
    """The plan of ``sql`` (PostgreSQL with sequential scans priced out, so a plan that
    cannot use the partial index shows a scan of the table)."""
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        if engine.dialect.name == "sqlite":
            rows = raw.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
            return " | ".join(str(r[-1]) for r in rows)
        with raw.cursor() as cursor:
            cursor.execute("SET enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            rows = cursor.fetchall()
            cursor.execute("RESET enable_seqscan")
        conn.rollback()
        return " | ".join(str(r[0]) for r in rows)


def test_the_index_is_partial_and_the_lookup_by_id_probes_it(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        assert "IS NOT NULL" in _definition(keep.engine)
        session = keep.sessions.open("lc", ORG)
        session.add_drafts([MessageDraft(Role.USER, f"m{i}", metadata={INDEXED_MARK: f"lc-{i}"})
                            for i in range(20)])
        session.add_user("no id")
        with statements.captured(keep.engine, lambda sql: "SELECT" in sql) as captured:
            found = keep.repository.stored_marks(session.id, INDEXED_MARK,
                                                 ["lc-3", "lc-19", "lc-99"])
        assert found == {"lc-3", "lc-19"}
        (sql, params), = captured
        plan = _plan(keep.engine, sql, params)
        assert MARK_INDEX in plan, plan


def test_0017_steps_down_to_the_whole_index_and_up_keeping_the_lookups(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate.upgrade(engine, "0016_langgraph_checkpoints")
    assert "IS NOT NULL" not in _definition(engine)
    migrate.upgrade(engine)
    assert "IS NOT NULL" in _definition(engine)
    with Chatkeep(db_url, create_schema=False, dispatcher="inline") as keep:
        session = keep.sessions.open("steps", ORG)
        session.add_drafts([MessageDraft(Role.USER, "a", metadata={INDEXED_MARK: "lc-a"}),
                            MessageDraft(Role.USER, "b")])
    migrate.downgrade(engine, "0016_langgraph_checkpoints")
    assert "IS NOT NULL" not in _definition(engine)
    migrate.upgrade(engine)
    assert "IS NOT NULL" in _definition(engine)
    with Chatkeep(db_url, create_schema=False, dispatcher="inline") as keep:
        assert keep.repository.stored_marks(session.id, INDEXED_MARK, ["lc-a", "b"]) == \
            {"lc-a"}
    engine.dispose()


def test_append_unmarked_skips_an_id_held_anywhere_and_its_check_probes_the_index(
        db_url: str) -> None:
    """The store has the last word on what is new: an id the session's first message
    holds is skipped however many messages came after it (overlapping LangChain runs
    decide from states that differ), and the check under the lock probes the index."""
    with Chatkeep(db_url, dispatcher="inline") as keep:
        session = keep.sessions.open("unmarked", ORG)
        session.add_drafts([MessageDraft(Role.USER, "first", metadata={INDEXED_MARK: "lc-0"})])
        session.add_drafts([MessageDraft(Role.USER, f"m{i}") for i in range(30)])
        drafts = [MessageDraft(Role.USER, "first", metadata={INDEXED_MARK: "lc-0"}),
                  MessageDraft(Role.ASSISTANT, "new", metadata={INDEXED_MARK: "lc-1"})]
        probes = statements.captured(
            keep.engine, lambda sql: sql.startswith("SELECT") and " IN " in sql)
        with probes as captured:
            appended = keep.repository.append_unmarked(
                session.id, INDEXED_MARK, prepare_batch(drafts, keep.counter))
        assert [m.metadata[INDEXED_MARK] for m in appended] == ["lc-1"]
        assert [m.seq for m in appended] == [32]
        (sql, params), = captured
        plan = _plan(keep.engine, sql, params)
        assert MARK_INDEX in plan, plan
