"""Dumps under load and across databases: an export taken while writers run is one
consistent cut; a tenant's dump moves into a database that holds other tenants (ids
remapped), on either store and across them; an import is streamed in batches."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select, text

from chatkeep import Chatkeep, Ref, Usage
from chatkeep.store import dump as dump_module
from chatkeep.store.dump import dump_lines, restore_file, restore_lines, write_dump
from chatkeep.store.migrate import head_revision
from chatkeep.store.schema import chat_messages, chat_usage, memories

ORG = Ref("organization", 7)
OTHER = Ref("organization", 8)
SCHEMA = head_revision()


def seeded(url: str, tenant: Ref, sessions: int = 3, turns: int = 4) -> Chatkeep:
    keep = Chatkeep(url, dispatcher="inline")
    for n in range(sessions):
        s = keep.sessions.open(f"{tenant.id_text}-{n}", tenant=tenant, title=f"t{n}")
        for i in range(turns):
            s.add_user(f"question {i} of {n}")
            s.add_assistant(f"answer {i} of {n}", usage=Usage(10 + i, 2), model="m")
    first = keep.memory.add(tenant, f"{tenant.id_text} prefers email")
    keep.memory.update(tenant, first.id, f"{tenant.id_text} prefers email in the morning")
    return keep


def consistent(keep: Chatkeep, tenant: Ref) -> int:
    """Assert every session of ``tenant`` agrees with its ledger, has gapless seqs and
    takes an append; returns how many sessions there are."""
    found = keep.sessions.list(tenant, limit=1000)
    for listed in found:
        s = keep.sessions.get(listed.id, tenant)
        assert s.total_tokens == keep.repository.usage_sum(s.id), s.id
        assert [m.seq for m in s.messages] == list(range(1, s.message_count + 1))
        s.add_user("after the restore")
        assert s.messages[-1].seq == s.message_count
    return len(found)


def test_an_export_during_writes_is_one_consistent_cut(tmp_path: Path, db_url: str) -> None:
    """Sessions created and messages appended between the export's reads of two tables
    (deterministically, then by threads throughout) are either wholly in the dump or
    not at all: the import succeeds and every session is consistent and writable."""
    source = seeded(db_url, ORG, sessions=4)
    lines = dump_lines(source.engine, SCHEMA, batch=2)
    head = [next(lines), next(lines)]  # the header and a session: the snapshot is taken
    late = source.sessions.create(ORG, title="created during the export")
    late.add_user("hello")
    late.add_assistant("hi", usage=Usage(3, 0))
    for listed in source.sessions.list(ORG):
        s = source.sessions.get(listed.id, ORG)
        s.add_assistant("appended during the export", usage=Usage(5, 1), model="m")

    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        with Chatkeep(db_url, dispatcher="inline") as keep:
            while not stop.is_set():
                try:
                    s = keep.sessions.create(ORG, title=f"writer {n}")
                    s.add_user("question")
                    s.add_assistant("answer", usage=Usage(1, 1))
                except BaseException as exc:  # surfaced below
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    try:
        rest = []
        for raw in lines:  # slowly: 2 rows per round trip while the writers run
            rest.append(raw)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors
    dump = tmp_path / "live.jsonl"
    dump.write_bytes(b"".join(head + rest))
    source.close()

    target = f"sqlite:///{tmp_path / 'target.db'}"
    with Chatkeep(target) as keep:
        counts = restore_file(keep.engine, dump, SCHEMA)
        assert counts["chat_sessions"] == 4  # the snapshot's, none of the later ones
        assert consistent(keep, ORG) == 4


@pytest.mark.pgbouncer
def test_an_export_holds_one_snapshot_behind_any_pooler(tmp_path: Path, db_url: str) -> None:
    """A session created after the export read the sessions table brings none of its
    rows into the dump (through PgBouncer in transaction mode too)."""
    with seeded(db_url, ORG, sessions=2) as keep:
        lines = dump_lines(keep.engine, SCHEMA, batch=1)
        taken = [next(lines), next(lines)]
        late = keep.sessions.create(ORG, title="late")
        late.add_user("not in the dump")
        body = b"".join([*taken, *lines])
    assert late.id.encode() not in body and b"not in the dump" not in body


def test_a_tenant_moves_into_a_database_that_holds_others(tmp_path: Path,
                                                           db_url: str) -> None:
    """ORG's dump from SQLite imports into a database (either store) whose serial ids
    ORG's rows would collide with; it exports there byte for byte as it left, and back
    into a SQLite file that holds a third tenant."""
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    with seeded(source_url, ORG) as source:
        mine = b"".join(dump_lines(source.engine, SCHEMA, ORG))
    (tmp_path / "org.jsonl").write_bytes(mine)

    with seeded(db_url, OTHER, sessions=2) as target:  # ids 1.. taken by OTHER
        before = b"".join(dump_lines(target.engine, SCHEMA, OTHER))
        with target.engine.connect() as conn:
            assert conn.execute(select(func.min(chat_messages.c.id))).scalar_one() == 1
        restore_file(target.engine, tmp_path / "org.jsonl", SCHEMA)
        assert b"".join(dump_lines(target.engine, SCHEMA, ORG)) == mine
        assert b"".join(dump_lines(target.engine, SCHEMA, OTHER)) == before
        write_dump(dump_lines(target.engine, SCHEMA, ORG), tmp_path / "again.jsonl")
        assert consistent(target, ORG) == 3 and consistent(target, OTHER) == 2
        (live,) = [m for m in target.memory.list(ORG)]
        assert live.content == "7 prefers email in the morning"
        with target.engine.connect() as conn:  # the superseded row points at its successor
            linked = conn.execute(text(
                "SELECT count(*) FROM memories old JOIN memories new "
                "ON old.superseded_by = new.id AND old.tenant_id = new.tenant_id "
                "WHERE old.tenant_id = '7'")).scalar_one()
        assert linked == 1

    back_url = f"sqlite:///{tmp_path / 'back.db'}"
    with seeded(back_url, Ref("organization", 9), sessions=1) as back:
        restore_file(back.engine, tmp_path / "again.jsonl", SCHEMA)
        assert b"".join(dump_lines(back.engine, SCHEMA, ORG)) == mine


class _Counted:
    """A dump's lines, counting how many the import has pulled."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines, self.pulled = lines, 0

    def __iter__(self) -> Iterator[bytes]:
        for raw in self.lines:
            self.pulled += 1
            yield raw


def _rows_of(statement: str, parameters: Any, executemany: bool) -> int:
    """Rows an INSERT writes: one per parameter set of an executemany, else its flat values
    over its columns (SQLAlchemy's multi-row VALUES form)."""
    if executemany and isinstance(parameters, list | tuple) and \
            isinstance(parameters[0], dict | tuple | list):
        return len(parameters)
    names = statement[statement.index("(") + 1:statement.index(")")].split(",")
    return max(1, len(parameters) // len(names))


@pytest.mark.parametrize("sessions", [3, 12])
def test_an_import_holds_one_batch_however_large_the_dump(tmp_path: Path, db_url: str,
                                                          sessions: int,
                                                          monkeypatch: Any) -> None:
    """Rows go in by executemany of at most BATCH rows, and at every insert the rows read
    but not yet written are under one batch: what the import holds does not grow with
    the dump."""
    monkeypatch.setattr(dump_module, "BATCH", 10)
    with seeded(f"sqlite:///{tmp_path / 's.db'}", ORG, sessions=sessions,
                turns=6) as source:
        lines = list(dump_lines(source.engine, SCHEMA))
    counted = _Counted(lines)
    with Chatkeep(db_url) as keep:
        keep.sessions.list(ORG)  # the schema exists before the listener counts
        inserts: list[tuple[int, int]] = []  # (rows in the statement, rows held)
        written = 0

        @event.listens_for(keep.engine, "before_cursor_execute")
        def _count(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                   executemany: bool) -> None:
            nonlocal written
            if statement.lstrip().upper().startswith("INSERT"):
                rows = _rows_of(statement, parameters, executemany)
                inserts.append((rows, counted.pulled - 2 - written))  # header, trailer
                written += rows

        counts = restore_lines(keep.engine, counted, SCHEMA)
    messages = sessions * 12
    assert counts["chat_messages"] == messages
    assert max(rows for rows, _ in inserts) <= 10, inserts
    assert max(held for _, held in inserts) <= 10 + 1
    assert sum(rows for rows, _ in inserts) >= messages  # nothing skipped
    assert len(inserts) < sum(counts.values())  # batched, not row by row


def test_a_postgresql_export_reads_through_a_server_side_cursor(tmp_path: Path,
                                                                db_url: str) -> None:
    """Paused mid-table, the export's backend has fetched only a batch: its last
    statement is a FETCH of a named cursor, not the whole SELECT."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite steps through rows as they are read")
    with seeded(db_url, ORG, sessions=3) as keep:
        lines = dump_lines(keep.engine, SCHEMA, batch=2)
        for _ in range(6):  # header, 3 sessions, 2 messages
            next(lines)
        with keep.engine.connect() as conn:
            queries = conn.execute(text(
                "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'idle in transaction'")).scalars().all()
        lines.close()
    assert any(q.lstrip().upper().startswith("FETCH FORWARD 2") for q in queries), queries


def test_the_dump_carries_every_table_of_the_schema() -> None:
    """A table added to the schema joins the dump (or is named as derived)."""
    from chatkeep.store.dump_format import DERIVED, TABLES
    from chatkeep.store.schema import metadata

    carried = {t.name for t in TABLES} | set(DERIVED)
    assert set(metadata.tables) - carried == set()
    assert {chat_usage.name, memories.name} <= carried


def test_lifecycle_records_move_with_their_tenant(tmp_path: Path, db_url: str) -> None:
    """Legal holds, the retention policy, erasures with their items and the lifecycle log
    go with the tenant; a log line names its hold by the hold's new id."""
    from datetime import UTC, datetime

    from chatkeep.store.schema import (
        chat_erased_items,
        chat_erasures,
        chat_holds,
        chat_lifecycle_log,
        chat_retention,
        ref_values,
    )

    now = datetime(2026, 1, 2, tzinfo=UTC)
    tenant = ref_values("tenant", ORG)
    source_url = f"sqlite:///{tmp_path / 'life.db'}"
    with seeded(source_url, ORG, sessions=1) as source, source.engine.begin() as conn:
        (session,) = source.sessions.list(ORG)
        conn.execute(chat_holds.insert(), [
            {**tenant, **ref_values("actor", None), **ref_values("subject", None),
             "session_id": session.id, "reason": "litigation", "placed_by": "ops",
             "placed_at": now, "released_at": None}])
        conn.execute(chat_retention.insert(), {**tenant, "session_idle_days": 30,
                                               "memory_idle_days": None, "updated_at": now})
        erasure = "0190a0a0-0000-7000-8000-000000000001"
        conn.execute(chat_erasures.insert(), {
            "id": erasure, **tenant, "scope": "actor", "scope_type": "user",
            "scope_id": "3", "state": "done", "counts": {"sessions": 1},
            "requested_by": "ops", "started_at": now, "finished_at": now, "digest": "ab"})
        conn.execute(chat_erased_items.insert(), {"erasure_id": erasure, **tenant,
                                                  "surface": "session", "item_id": "x"})
        hold_id = conn.execute(select(chat_holds.c.id)).scalar_one()
        conn.execute(chat_lifecycle_log.insert(), {
            **tenant, "action": "hold", "scope": "session", "scope_type": None,
            "scope_id": session.id, "actor_by": "ops", "erasure_id": None,
            "hold_id": hold_id, "counts": {}, "digest": None, "created_at": now})
    with Chatkeep(source_url) as source:
        mine = b"".join(dump_lines(source.engine, SCHEMA, ORG))
    (tmp_path / "life.jsonl").write_bytes(mine)
    with seeded(db_url, OTHER, sessions=1) as target:
        with target.engine.begin() as conn:  # hold id 1 is OTHER's in the target
            conn.execute(chat_holds.insert(), {
                **ref_values("tenant", OTHER), **ref_values("actor", None),
                **ref_values("subject", None), "session_id": None, "reason": "audit",
                "placed_by": None, "placed_at": now, "released_at": None})
        counts = restore_file(target.engine, tmp_path / "life.jsonl", SCHEMA)
        assert {name: counts[name] for name in ("chat_holds", "chat_retention",
                                                "chat_erasures", "chat_erased_items",
                                                "chat_lifecycle_log")} == dict.fromkeys(
            ("chat_holds", "chat_retention", "chat_erasures", "chat_erased_items",
             "chat_lifecycle_log"), 1)
        with target.engine.connect() as conn:
            reason = conn.execute(select(chat_holds.c.reason).join(
                chat_lifecycle_log, chat_lifecycle_log.c.hold_id == chat_holds.c.id)
            ).scalar_one()
        assert reason == "litigation"
        assert b"".join(dump_lines(target.engine, SCHEMA, ORG)) == mine
