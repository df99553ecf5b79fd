"""Retention per tenant: the sweep deletes exactly the idle set through the same delete
path, skips held scopes, is a no-op when run again, and sweepers at once do no double
work and raise nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from chatkeep import Chatkeep, Ref
from chatkeep.store import make_engine

T1, T2, ANN, BOB = Ref("org", 1), Ref("org", 2), Ref("user", "ann"), Ref("user", "bob")
NOW = datetime.now(UTC)


def age(db_url: str, table: str, column: str, ids: list[object], days: int) -> None:
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {table} SET {column} = :t WHERE id = :i"),
                     [{"t": NOW - timedelta(days=days), "i": i} for i in ids])
    engine.dispose()


def test_the_sweep_deletes_exactly_the_idle_set_and_reruns_as_a_no_op(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    old, recent, held, elsewhere = (keep.sessions.create(t, a) for t, a in
                                    ((T1, ANN), (T1, ANN), (T1, BOB), (T2, ANN)))
    for s in (old, recent, held, elsewhere):
        s.add_user("zqretainqz")
    age(db_url, "chat_sessions", "last_message_at", [old.id, held.id, elsewhere.id], 40)
    age(db_url, "chat_sessions", "last_message_at", [recent.id], 20)
    stale = keep.memory.add(T1, "stale fact", scope="personal", actor=ANN)
    fresh = keep.memory.add(T1, "fresh fact", scope="personal", actor=ANN)
    kept = keep.memory.add(T1, "held fact", scope="personal", actor=BOB)
    age(db_url, "memories", "updated_at", [stale.id, kept.id], 40)
    keep.retention.set_policy(T1, session_idle_days=30, memory_idle_days=30)
    keep.holds.place(T1, actor=BOB, reason="dispute")
    seen: list[int] = []

    report = keep.retention.sweep(progress=lambda r: seen.append(r.sessions))

    assert (report.sessions, report.messages, report.memories, report.held) == (1, 1, 1, 2)
    assert seen and seen[-1] == 1
    remaining = {s.id for s in keep.sessions.list(T1)}
    assert remaining == {recent.id, held.id}
    assert {m.id for m in keep.memory.list(T1)} == {fresh.id, kept.id}
    assert len(keep.sessions.list(T2)) == 1  # no policy, no default: kept
    again = keep.retention.sweep()
    assert (again.sessions, again.memories) == (0, 0)
    assert keep.retention.policy(T1).session_idle_days == 30
    assert keep.retention.policy(T2).session_idle_days is None
    assert [e["action"] for e in keep.lifecycle.log(T1)].count("retention_delete") == 2


def test_the_config_default_applies_to_tenants_without_a_policy(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(config={"privacy": {"session_retention_days": 7}})
    idle = keep.sessions.create(T2, ANN)
    idle.add_user("old")
    mine = keep.sessions.create(T1, ANN)
    mine.add_user("old too")
    age(db_url, "chat_sessions", "last_message_at", [idle.id, mine.id], 10)
    keep.retention.set_policy(T1, session_idle_days=None)  # T1 keeps its sessions
    assert keep.retention.sweep().sessions == 1
    assert keep.sessions.list(T2) == [] and len(keep.sessions.list(T1)) == 1
    assert keep.retention.clear_policy(T1)
    assert keep.retention.sweep(NOW + timedelta(days=1)).sessions == 1


def test_sweepers_at_once_do_no_double_work(db_url: str) -> None:
    setup = Chatkeep(db_url)
    ids = []
    for _ in range(24):
        session = setup.sessions.create(T1, ANN)
        session.add_user("idle")
        ids.append(session.id)
    age(db_url, "chat_sessions", "last_message_at", ids, 40)
    setup.retention.set_policy(T1, session_idle_days=30)
    setup.close()
    keeps = [Chatkeep(db_url) for _ in range(3)]
    reports: list[object] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(keeps))

    def sweep(keep: Chatkeep) -> None:
        try:
            start.wait()
            reports.append(keep.retention.sweep(batch_size=5))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sweep, args=(k,)) for k in keeps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sum(r.sessions for r in reports) == 24  # type: ignore[attr-defined]
    assert keeps[0].sessions.list(T1) == []
    deletes = [e for e in keeps[0].lifecycle.log(T1) if e["action"] == "retention_delete"]
    assert len(deletes) == 24 and len({e["scope_id"] for e in deletes}) == 24
    for keep in keeps:
        keep.close()


def test_the_celery_beat_runs_the_retention_sweep(tmp_path: object) -> None:
    celery = __import__("pytest").importorskip("celery", reason="the celery extra")
    from chatkeep.jobs import celery as jobs

    url = f"sqlite:///{tmp_path}/beat.db"
    keep = Chatkeep(url)
    session = keep.sessions.create(T1, ANN)
    session.add_user("idle")
    age(url, "chat_sessions", "last_message_at", [session.id], 40)
    keep.retention.set_policy(T1, session_idle_days=30)
    app = jobs.make_app("memory://", task_always_eager=True)
    assert app.conf.beat_schedule["chatkeep-retention-sweep"]["task"] == jobs.RETENTION
    jobs.configure(lambda: keep)
    try:
        assert app.tasks[jobs.RETENTION].apply().get() == 1
        assert keep.sessions.list(T1) == []
        assert app.tasks[jobs.RETENTION].apply().get() == 0
    finally:
        jobs.configure(jobs._default_keep)
        keep.close()
    assert isinstance(celery.__name__, str)
