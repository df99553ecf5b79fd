"""Memory expiry and recall times (issue 36 item 7, migration 0014): an expired memory is
not served and the retention sweep deletes it (whatever the policy), with the versions it
superseded; "not recalled or updated for N days" reads the recall time; held scopes are
kept; a rerun is a no-op; the columns migrate onto a database with data, and move in a
dump."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import inspect

from chatkeep import Chatkeep, InvalidArgument, InvalidDump, MemoryNotFound, Ref
from chatkeep.store import make_engine, migrate
from chatkeep.store.memory_index import CACHED_COLUMNS, RECALL_COLUMNS
from chatkeep.store.schema import memories

T1, T2, ANN, BOB = Ref("org", 1), Ref("org", 2), Ref("user", "ann"), Ref("user", "bob")
NOW = datetime.now(UTC)


def set_times(db_url: str, ids: list[int], **days: int | None) -> None:
    """Move ``column=days ago`` (negative: ahead; ``None``: unset) on these memories."""
    values = {c: None if d is None else NOW - timedelta(days=d) for c, d in days.items()}
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.update(memories).where(memories.c.id.in_(ids)).values(**values))
    engine.dispose()


def stored(db_url: str, column: str, memory_id: int) -> datetime | None:
    engine = make_engine(db_url)
    with engine.connect() as conn:
        value = conn.execute(sa.select(memories.c[column]).where(
            memories.c.id == memory_id)).scalar_one()
    engine.dispose()
    return None if value is None else value.replace(tzinfo=value.tzinfo or UTC)


@pytest.mark.pgbouncer
def test_the_sweep_deletes_expired_and_unrecalled_memories_and_nothing_else(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    add = keep.memory.add
    expired = add(T2, "expired fact", scope="personal", actor=ANN)  # T2: no policy at all
    future = add(T2, "expires later", scope="personal", actor=ANN)
    old = add(T1, "old wording", scope="personal", actor=ANN)
    newer = keep.memory.update(T1, old.id, "new wording")
    recalled = add(T1, "old but recalled", scope="personal", actor=ANN)
    unrecalled = add(T1, "old and never recalled", scope="personal", actor=ANN)
    held = add(T1, "old, under a hold", scope="personal", actor=BOB)
    held_expired = add(T1, "expired, under a hold", scope="personal", actor=BOB)
    set_times(db_url, [expired.id, newer.id, held_expired.id], expires_at=1)
    set_times(db_url, [future.id], expires_at=-1)
    set_times(db_url, [recalled.id, unrecalled.id, held.id], updated_at=40)
    set_times(db_url, [recalled.id], last_recalled_at=3)
    set_times(db_url, [unrecalled.id, held.id], last_recalled_at=35)
    keep.retention.set_policy(T1, memory_idle_days=30)
    keep.holds.place(T1, actor=BOB, reason="dispute")

    report = keep.retention.sweep()

    # The expired one of T2, the expired live version of T1 with the version it
    # superseded, and the unrecalled one; the hold kept two.
    assert (report.memories, report.expired, report.held) == (4, 2, 2)
    left = {m.id for m in keep.memory.list(T1, include_superseded=True)}
    assert left == {recalled.id, held.id, held_expired.id}
    assert {m.id for m in keep.memory.list(T2)} == {future.id}
    again = keep.retention.sweep()
    assert (again.memories, again.expired) == (0, 0)


@pytest.mark.pgbouncer
def test_an_expired_memory_is_not_served_before_the_sweep(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    gone = keep.memory.add(T1, "zqexpiry pancakes on sundays", scope="personal", actor=ANN)
    kept = keep.memory.add(T1, "zqexpiry waffles on mondays", scope="personal", actor=ANN)
    set_times(db_url, [gone.id], expires_at=0)
    session = keep.sessions.create(T1, ANN)
    assert [m.id for m in keep.memory.recall(session, "zqexpiry")] == [kept.id]
    assert [m.id for m in keep.memory.recall(session)] == [kept.id]
    listed = keep.memory.list(T1)  # review shows what awaits the sweep, marked
    assert {m.id for m in listed} == {gone.id, kept.id}
    assert [m.id for m in listed if m.expired(datetime.now(UTC))] == [gone.id]
    assert [m.id for m in keep.memory.list(T1, include_expired=False)] == [kept.id]


def test_set_expiry_sets_clears_and_refuses(make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    fact = keep.memory.add(T1, "a fact with a time to live")
    dated = keep.memory.set_expiry(T1, fact.id, timedelta(hours=2))
    assert dated.expires_at is not None
    assert abs(dated.expires_at - datetime.now(UTC) - timedelta(hours=2)) < timedelta(minutes=1)
    assert keep.memory.set_expiry(T1, fact.id, None).expires_at is None
    for ttl in (timedelta(0), timedelta(days=-1), 60, timedelta(days=40_000)):
        with pytest.raises(InvalidArgument, match="ttl"):
            keep.memory.set_expiry(T1, fact.id, ttl)  # type: ignore[arg-type]
    with pytest.raises(MemoryNotFound):
        keep.memory.set_expiry(T2, fact.id, timedelta(hours=1))  # another tenant's id


@pytest.mark.sync_api
def test_recall_stamps_its_time_at_most_once_per_granularity(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(config={"memory": {"recall_stamp_every": "1h"}})
    fact = keep.memory.add(T1, "zqstamp tea with lemon", scope="personal", actor=ANN)
    session = keep.sessions.create(T1, ANN)
    assert stored(db_url, "last_recalled_at", fact.id) is None
    updates: list[str] = []

    def count(conn: object, cursor: object, statement: str, *_: object) -> None:
        if statement.lstrip().upper().startswith("UPDATE MEMORIES"):
            updates.append(statement)

    sa.event.listen(keep.engine, "before_cursor_execute", count)
    [found] = keep.memory.recall(session, "zqstamp")
    first = stored(db_url, "last_recalled_at", fact.id)
    assert first is not None and abs(first - datetime.now(UTC)) < timedelta(minutes=1)
    assert found.id == fact.id and len(updates) == 1
    for _ in range(3):  # fresh: no write at all
        keep.memory.recall(session, "zqstamp")
        keep.memory.provider(session)
    assert len(updates) == 1 and stored(db_url, "last_recalled_at", fact.id) == first
    set_times(db_url, [fact.id], last_recalled_at=1)  # older than the granularity
    keep.memory.recall(session, "zqstamp")
    assert len(updates) == 2
    sa.event.remove(keep.engine, "before_cursor_execute", count)


@pytest.mark.sync_api
def test_sweepers_at_once_delete_each_expired_memory_once(db_url: str) -> None:
    setup = Chatkeep(db_url)
    ids = [setup.memory.add(T1, f"expiring fact {i}").id for i in range(30)]
    setup.close()
    set_times(db_url, ids, expires_at=1)
    keeps = [Chatkeep(db_url) for _ in range(3)]
    reports: list[object] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(keeps))

    def sweep(keep: Chatkeep) -> None:
        try:
            start.wait()
            reports.append(keep.retention.sweep(batch_size=4))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sweep, args=(k,)) for k in keeps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sum(r.expired for r in reports) == 30  # type: ignore[attr-defined]
    assert keeps[0].memory.list(T1) == []
    for keep in keeps:
        keep.close()


def test_recall_stamps_leave_the_vector_cache_exact() -> None:
    """The SQLite generation trigger fires on updates of every column but the recall
    ones: the two lists are the table's columns."""
    names = set(memories.columns.keys())
    assert set(CACHED_COLUMNS) | set(RECALL_COLUMNS) == names
    assert not set(CACHED_COLUMNS) & set(RECALL_COLUMNS)


def test_0014_adds_the_columns_to_a_database_with_memories(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate.upgrade(engine, "0013_quotas")
    old = sa.table("memories", *(sa.column(c) for c in CACHED_COLUMNS if c != "id"))
    with engine.begin() as conn:  # as 0013's code wrote it (today's reads the new columns)
        conn.execute(old.insert().values(
            tenant_type="org", tenant_id="1", tenant_id_int=True, scope="tenant",
            scope_key="tenant", content="written before the upgrade", content_key="k",
            source_through_seq=0, created_at=NOW, updated_at=NOW))
    migrate.upgrade(engine)
    assert {"expires_at", "ttl_seconds", "last_recalled_at"} <= {
        c["name"] for c in inspect(engine).get_columns("memories")}
    keep = Chatkeep(db_url, create_schema=False)
    [found] = keep.memory.list(T1)
    assert (found.content, found.expires_at, found.last_recalled_at) == (
        "written before the upgrade", None, None)
    keep.close()
    if engine.dialect.name == "sqlite":  # the trigger keeps its stamps on recall columns
        with engine.connect() as conn:
            sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = "
                                       "'memory_generations_mu'").scalar_one()
        assert "UPDATE OF" in sql and "last_recalled_at" not in sql
    migrate.downgrade(engine, "0013_quotas")
    assert "expires_at" not in {c["name"] for c in inspect(engine).get_columns("memories")}
    migrate.upgrade(engine)
    engine.dispose()


def test_a_dump_carries_expiry_and_refuses_a_time_to_live_without_it(
        tmp_path: Path, db_url: str) -> None:
    from chatkeep.store.dump import dump_lines, restore_file
    from chatkeep.store.migrate import head_revision

    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    with Chatkeep(source_url) as source:
        fact = source.memory.add(T1, "moves with its expiry")
        set_at = datetime.now(UTC)  # not NOW: the module may have been imported long ago
        assert source.memory.store.writes.set_expiry(T1, fact.id, 3600)
        lines = list(dump_lines(source.engine, head_revision(), T1))
    (tmp_path / "ok.jsonl").write_bytes(b"".join(lines))
    with Chatkeep(db_url) as target:
        restore_file(target.engine, tmp_path / "ok.jsonl", head_revision())
        [moved] = target.memory.list(T1)
        assert moved.expires_at is not None
        assert abs(moved.expires_at - set_at - timedelta(hours=1)) < timedelta(minutes=5)
    from chatkeep.store.dump_format import decoded

    row = next(json.loads(line)["row"] for line in lines
               if json.loads(line).get("table") == "memories")
    assert row["ttl_seconds"] == 3600
    with pytest.raises(InvalidDump, match="ttl_seconds"):
        decoded(memories, {**row, "expires_at": None})
    with pytest.raises(InvalidDump, match="ttl_seconds"):
        decoded(memories, {**row, "ttl_seconds": 0})
