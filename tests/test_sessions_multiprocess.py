"""Two processes appending to one session on one SQLite file (and on PostgreSQL)."""

from __future__ import annotations

import multiprocessing

from chatkeep import Chatkeep, Ref


def _append(url: str, session_id: str, worker: int, count: int) -> None:
    keep = Chatkeep(url)
    session = keep.sessions.get_unscoped(session_id)
    for i in range(count):
        session.add_user(f"p{worker}-{i}")
    keep.close()


def test_processes_appending_to_one_session_keep_a_gapless_seq(db_url: str) -> None:
    keep = Chatkeep(db_url)
    session = keep.sessions.create(tenant=Ref("organization", 1))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append, args=(db_url, session.id, w, 60)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    messages = session.messages
    assert [m.seq for m in messages] == list(range(1, 121))
    assert sorted(m.content for m in messages) == sorted(
        f"p{w}-{i}" for w in range(2) for i in range(60))
    for w in range(2):
        mine = [int((m.content or "").split("-")[1]) for m in messages
                if (m.content or "").startswith(f"p{w}-")]
        assert mine == list(range(60))
    keep.close()
