"""Many processes on one session on PostgreSQL: appends and compression stay exact.

Each worker is a separate interpreter (multiprocessing spawn) with its own engine
and pool, so the only thing that can keep them consistent is the database.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pg_workers import (
    SYSTEM,
    RangeSummarizer,
    append_worker,
    build_once_worker,
    chat_worker,
    compressor,
    open_key_worker,
    parse_ranges,
)

from chatkeep import Chatkeep, Ref
from chatkeep.formats.base import unfence

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.pgbouncer]

ORG = Ref("organization", 1)
WORKERS = 8


@pytest.fixture(scope="module")
def pool() -> Iterator[tuple[Any, Any]]:
    """Eight spawned worker processes shared by the tests here (each test would otherwise
    pay for eight interpreter start-ups), and a manager for barriers they can share."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(WORKERS) as workers:
        yield workers, manager  # leaving the block terminates the idle workers


def run(pool: tuple[Any, Any], target: Callable[..., Any],
        args: Callable[[int, Any], tuple[Any, ...]], timeout: float = 120) -> list[Any]:
    """Run ``target(*args(w, barrier))`` for w in 0..7, one per process, all at once: each
    task waits on ``barrier`` (one task per process, since none returns before all
    eight have started). Returns the results in worker order."""
    workers, manager = pool
    barrier = manager.Barrier(WORKERS, timeout=60)
    pending = [workers.apply_async(target, args(w, barrier)) for w in range(WORKERS)]
    return [p.get(timeout) for p in pending]


def check_summary_steps(summary: str | None, watermark: int, version: int) -> None:
    """One summary per watermark step: contiguous ranges from 1 to the watermark."""
    ranges = parse_ranges(summary)
    assert ranges, summary
    assert ranges[0][0] == 1
    assert all(first <= last for first, last in ranges)
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges)), ranges
    assert ranges[-1][1] == watermark
    assert version == len(ranges)


def test_eight_processes_opening_one_key_get_one_session(
        pool: Any, pg_url: str, pg_keep: Callable[..., Chatkeep], api: str) -> None:
    keep = pg_keep()
    keep.start()  # the schema, before the workers (who do not create it) race
    for key in ("support-4711", "support-4712"):  # twice: a second race on a fresh key
        ids = run(pool, open_key_worker, lambda w, barrier, k=key: (pg_url, k, barrier, api))
        assert len(set(ids)) == 1, ids
        assert keep.sessions.by_key(key, ORG).id == ids[0]
    assert sorted(s.key or "" for s in keep.sessions.list(ORG)) == [
        "support-4711", "support-4712"]


def test_eight_processes_appending_lose_and_duplicate_nothing(
        pool: Any, pg_url: str, pg_keep: Callable[..., Chatkeep], api: str) -> None:
    keep = pg_keep()
    session = keep.sessions.create(tenant=ORG)
    count = 200
    run(pool, append_worker, lambda w, start: (pg_url, session.id, w, count, start, api))

    messages = session.messages
    total = WORKERS * count
    assert [m.seq for m in messages] == list(range(1, total + 1))  # gapless, no duplicate
    contents = [m.content or "" for m in messages]
    assert len(set(contents)) == total
    assert set(contents) == {f"p{w}-{i}" for w in range(WORKERS) for i in range(count)}
    for w in range(WORKERS):  # each process's own messages keep their order
        mine = [int(c.split("-")[1]) for c in contents if c.startswith(f"p{w}-")]
        assert mine == list(range(count))
    interleaved = sum(1 for a, b in itertools.pairwise(contents)
                      if a.split("-")[0] != b.split("-")[0])
    assert interleaved > WORKERS, "the workers did not actually run concurrently"
    session.refresh()
    assert session.message_count == total
    # Half the messages billed 5 tokens each: ledger and counter moved together.
    assert session.total_tokens == keep.repository.usage_sum(session.id) == 5 * total // 2


def test_eight_processes_compressing_at_once_store_one_summary(
        pool: Any, pg_url: str, pg_keep: Callable[..., Chatkeep], api: str) -> None:
    keep = pg_keep()
    session = keep.sessions.create(tenant=ORG)
    for i in range(10):  # 20 messages of ~80 tokens: ~1600 tokens against a 1000 budget
        session.add_user(f"U{i} " + "question " * 40)
        session.add_assistant(f"A{i} " + "answer " * 40)
    # All eight call build_history at once; the fold's claim (a lease) lets one of them
    # pay for the fold, the others replay what is stored (issue 22).
    outcomes = run(pool, build_once_worker, lambda w, barrier: (pg_url, session.id, barrier, api))

    session.refresh()
    assert sum(calls for calls, _ in outcomes) == 1
    assert session.row.summary_version == 1
    check_summary_steps(session.summary, session.summary_watermark, 1)
    watermark = session.summary_watermark
    assert 0 < watermark <= 16
    by_content = {m.content: m.seq for m in session.messages}
    for _, history in outcomes:
        if history[1]["content"].startswith("U"):  # replayed before the fold was stored
            assert [by_content[m["content"]] for m in history[1:]] == list(range(1, 21))
        else:  # the stored summary, then seq w+1...
            assert unfence(history[1]["content"]).endswith(f"[1-{watermark}]")
            assert [by_content[m["content"]] for m in history[2:]] == list(
                range(watermark + 1, 21))
    assert session.total_tokens == keep.repository.usage_sum(session.id) == 15
    assert session.message_count == 20  # compression never deletes


def test_eight_processes_chatting_on_one_session_fold_each_step_once(
        pool: Any, pg_url: str, pg_keep: Callable[..., Chatkeep], api: str) -> None:
    keep = pg_keep()
    session = keep.sessions.create(tenant=ORG)
    turns = 25
    outcomes = run(pool, chat_worker, lambda w, start: (pg_url, session.id, w, turns, start, api))

    session.refresh()
    version = session.row.summary_version
    assert version >= 5, "compression should have fired many times"
    check_summary_steps(session.summary, session.summary_watermark, version)
    messages = session.messages
    assert [m.seq for m in messages] == list(range(1, WORKERS * turns + 1))
    by_content = {m.content: m.seq for m in messages}
    for _, histories in outcomes:
        for history in histories:
            # What each call sent: a summary through some stored watermark w, then
            # exactly the messages w+1, w+2, ... that existed then; nothing lost or twice.
            assert history[0] == {"role": "system", "content": SYSTEM}
            ranges = parse_ranges(history[1]["content"]) if history[1]["role"] == "system" \
                else []
            watermark = ranges[-1][1] if ranges else 0
            if ranges:
                check_summary_steps(history[1]["content"], watermark, len(ranges))
                # ... and that summary is a prefix of the final one (never rewritten).
                assert (session.summary or "").startswith(
                    unfence(history[1]["content"]))
            replayed = [by_content[m["content"]] for m in history[1 + bool(ranges):]]
            assert replayed == list(range(watermark + 1, watermark + 1 + len(replayed)))
    calls = sum(calls for calls, _ in outcomes)
    assert version <= calls <= 1.2 * version  # the fold's claim: no fold paid for twice
    assert session.total_tokens == keep.repository.usage_sum(session.id) == 15 * calls
    # And the session is still in shape for the next caller in this process.
    history = compressor(RangeSummarizer()).build_history(session, SYSTEM)
    assert history[-1]["content"].startswith("W")
