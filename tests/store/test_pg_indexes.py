"""Every hot query is served by an index on PostgreSQL, checked with EXPLAIN.

The SQL is what the library really emits (captured with a cursor event while the
public call runs), planned with its real parameters against tables large enough
for the planner to care: 20,000 sessions over 200 tenants, 200,000 messages over
2,000 of them, statistics fresh. A sequential scan of ``chat_messages`` or
``chat_sessions`` in any of these plans fails the test.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pg_workers import pg_dsn
from sqlalchemy import event, insert, select, text, update

from chatkeep import Chatkeep, Ref
from chatkeep.store.schema import chat_sessions

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PG_URL = os.environ.get("CHATKEEP_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TENANTS = 200
SESSIONS_PER_TENANT = 100
MESSAGE_SESSIONS = 2_000
MESSAGES_EACH = 100
HOT_TABLES = ("chat_messages", "chat_sessions")


@dataclass
class BigStore:
    keep: Chatkeep
    message_session: str  # has 100 messages and a summary through seq 80


@pytest.fixture(scope="module")
def big_store() -> Iterator[BigStore]:
    dsn = pg_dsn(PG_URL)
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except Exception as exc:
        reason = f"PostgreSQL not reachable at {PG_URL}: {exc}"
        if os.environ.get("CHATKEEP_REQUIRE_SERVICES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    schema = f"ck_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    keep = Chatkeep(f"{PG_URL}{sep}options=-csearch_path%3D{schema}")
    try:
        yield seed(keep)
    finally:
        keep.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def seed(keep: Chatkeep) -> BigStore:
    """Bulk rows (setup only): sessions copied from a real one, messages generated in SQL."""
    rng = random.Random(7)
    now = datetime.now(UTC)
    template = keep.sessions.create(tenant=Ref("organization", 0))
    with keep.engine.connect() as conn:
        base = dict(conn.execute(select(chat_sessions).where(
            chat_sessions.c.id == template.id)).one()._mapping)
    rows = []
    for i in range(TENANTS * SESSIONS_PER_TENANT):
        last_seq = MESSAGES_EACH if i < MESSAGE_SESSIONS else rng.randint(1, 60)
        last = now - timedelta(minutes=rng.randint(0, 90 * 24 * 60))
        # Quiet sessions have mostly been distilled already; a few are waiting.
        distilled = last_seq if rng.random() < 0.97 else rng.randint(0, last_seq - 1)
        rows.append({**base, "id": str(uuid.UUID(int=rng.getrandbits(128))),
                     "tenant_type": "organization" if i % 4 else "workspace",
                     "tenant_id": str(i % TENANTS), "tenant_id_int": True,
                     "last_seq": last_seq, "distilled_through": distilled,
                     "last_message_at": last, "created_at": last - timedelta(hours=1)})
    message_session = rows[0]["id"]
    with keep.engine.begin() as conn:
        conn.execute(insert(chat_sessions), rows)
        conn.execute(text(
            "INSERT INTO chat_messages (session_id, seq, role, content, tokens, created_at, "
            "metadata) "
            "SELECT s.id, g, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END, "
            "'message ' || g || ' ' || repeat('lorem ipsum ', 8), 25, s.created_at, '{}' "
            "FROM (SELECT id, created_at FROM chat_sessions WHERE last_seq = :n "
            "      ORDER BY id LIMIT :m) s CROSS JOIN generate_series(1, :n) g"),
            {"n": MESSAGES_EACH, "m": MESSAGE_SESSIONS})
        conn.execute(update(chat_sessions).where(chat_sessions.c.id == message_session)
                     .values(summary="Earlier: the client asked about notice periods.",
                             summary_watermark=80, summary_version=1))
    with keep.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE chat_sessions")
        conn.exec_driver_sql("ANALYZE chat_messages")
        counted = conn.exec_driver_sql("SELECT count(*) FROM chat_messages").scalar_one()
    assert counted == MESSAGE_SESSIONS * MESSAGES_EACH
    return BigStore(keep, message_session)


def explain_reads(keep: Chatkeep, call: Callable[[], object]) -> list[tuple[str, Any]]:
    """Run ``call``; return ``(sql, plan)`` for every SELECT it issued."""
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            captured.append((statement, parameters))

    event.listen(keep.engine, "before_cursor_execute", capture)
    try:
        call()
    finally:
        event.remove(keep.engine, "before_cursor_execute", capture)
    plans = []
    with keep.engine.connect() as conn:
        for statement, parameters in captured:
            raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement,
                                       parameters).scalar_one()
            plan = json.loads(raw) if isinstance(raw, str) else raw
            plans.append((statement, plan[0]["Plan"]))
    return plans


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def assert_indexed(plans: list[tuple[str, Any]], table: str, index: str) -> None:
    """No sequential scan of a hot table anywhere; ``index`` (on ``table``) is used."""
    assert plans, "the call issued no SELECT"
    used = set()
    for statement, plan in plans:
        for node in nodes(plan):
            relation = node.get("Relation Name")
            assert not (node["Node Type"] == "Seq Scan" and relation in HOT_TABLES), (
                f"sequential scan of {relation} for:\n{statement}\n"
                f"{json.dumps(plan, indent=1)}")
            if "Index Name" in node:  # index, index-only and bitmap index scans
                used.add(node["Index Name"])
    assert index in used, f"{table} not read through {index} (used: {sorted(used)})"


def test_history_read_after_the_watermark_uses_the_seq_index(big_store: BigStore) -> None:
    keep = big_store.keep
    session = keep.sessions.get_unscoped(big_store.message_session)

    def build() -> None:
        history = keep.compressor.build_history(session, "Be brief.")
        assert len(history) == 2 + 20  # system, summary, seq 81..100

    plans = explain_reads(keep, build)
    assert any("chat_messages" in s and "seq >" in s for s, _ in plans)
    assert_indexed(plans, "chat_messages", "uq_chat_messages_session_seq")
    # The watermark bounds the index range itself (not a filter over the whole session).
    conds = [n.get("Index Cond", "") for _, p in plans for n in nodes(p)]
    assert any("session_id" in c and "seq >" in c for c in conds), conds


def test_session_list_by_tenant_uses_the_tenant_index(big_store: BigStore) -> None:
    keep = big_store.keep
    tenant = Ref("organization", 7)
    sessions: list[Any] = []
    plans = explain_reads(keep, lambda: sessions.extend(keep.sessions.list(tenant, limit=20)))
    assert len(sessions) == 20 and all(s.tenant == tenant for s in sessions)
    assert_indexed(plans, "chat_sessions", "ix_chat_sessions_tenant_recent")


def test_sweep_for_idle_undistilled_sessions_uses_an_index(big_store: BigStore) -> None:
    keep = big_store.keep
    claimed: list[str] = []
    plans = explain_reads(keep, lambda: claimed.extend(
        keep.memory.claim_idle(idle_after=timedelta(days=1), batch_size=50)))
    assert len(claimed) == 50
    sweep = [(s, p) for s, p in plans if "distilled_through" in s]
    assert sweep, "the sweep query was not captured"
    assert_indexed(sweep, "chat_sessions", "ix_chat_sessions_undistilled")


def test_history_read_walks_the_index_when_one_long_session_dominates(
        pg_schema_url: str) -> None:
    """One session holding nearly every message: the tail after its watermark is still an
    index range, not a scan of the session (the watermark reaches the planner as a value)."""
    with Chatkeep(pg_schema_url, dispatcher="inline") as keep:
        session = keep.sessions.create(tenant=Ref("organization", 1))
        with keep.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO chat_messages (session_id, seq, role, content, tokens, "
                "created_at, metadata) SELECT :id, g, CASE WHEN g % 2 = 1 THEN 'user' "
                "ELSE 'assistant' END, 'message ' || g, 5, now(), '{}' "
                "FROM generate_series(1, 5000) g"), {"id": session.id})
            conn.execute(update(chat_sessions).where(chat_sessions.c.id == session.id)
                         .values(last_seq=5000, summary="Earlier: a long talk.",
                                 summary_watermark=4990, summary_version=1))
        with keep.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ANALYZE chat_messages")
        plans = explain_reads(keep, lambda: keep.compressor.build_history(
            session.refresh(), "Be brief."))
    scans = [n for _, p in plans for n in nodes(p) if n.get("Relation Name") == "chat_messages"]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), scans
