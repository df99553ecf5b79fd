"""build_history latency by session length, and append throughput.

    python bench/history.py [--db-dir DIR] [--calls 1000] [--postgres URL]

Sessions of 100, 10,000 and 100,000 messages each have a summary in place with
20 messages after the watermark (what a long-lived session looks like). The
claim under test: a call costs what follows the watermark, not the session's
length, so the 100,000-message session should cost no more than 1.5x the
100-message one. Ratios come from one run on one machine, with the sizes' calls interleaved;
absolute times are printed for context only.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import insert, update

from chatkeep import Chatkeep, Ref
from chatkeep.store.schema import chat_messages, chat_sessions

SIZES = (100, 10_000, 100_000)
TAIL = 20
SYSTEM = "You are a helpful assistant for a law firm."


def seed_session(keep: Chatkeep, size: int) -> str:
    """Bulk-insert ``size`` messages (setup only; the library appends one by one)."""
    session = keep.sessions.create(Ref("organization", 1), Ref("user", 1))
    now = datetime.now(UTC)
    rows = [{"session_id": session.id, "seq": seq, "role": "user" if seq % 2 else "assistant",
             "content": f"message {seq} " + "lorem ipsum dolor " * 10, "tool_calls": None,
             "tool_call_id": None, "name": None, "tokens": 50, "created_at": now,
             "metadata": {}} for seq in range(1, size + 1)]
    with keep.engine.begin() as conn:
        for start in range(0, len(rows), 5000):
            conn.execute(insert(chat_messages), rows[start:start + 5000])
        conn.execute(update(chat_sessions).where(chat_sessions.c.id == session.id).values(
            last_seq=size, summary="Earlier: the client asked about clause 4 and notice.",
            summary_watermark=size - TAIL, summary_version=1, last_message_at=now))
    return session.id


def time_builds(keep: Chatkeep, session_ids: dict[int, str], calls: int) -> dict[int, float]:
    """Median build_history time per session size. Calls are interleaved (one per size,
    in turn), so a burst of load on a shared machine hits every size alike."""
    sessions = {size: keep.sessions.get(sid) for size, sid in session_ids.items()}
    for session in sessions.values():
        for _ in range(20):  # warm caches and the connection pool
            keep.compressor.build_history(session, SYSTEM)
    samples: dict[int, list[float]] = {size: [] for size in sessions}
    for _ in range(calls):
        for size, session in sessions.items():
            start = time.perf_counter()
            history = keep.compressor.build_history(session, SYSTEM)
            samples[size].append(time.perf_counter() - start)
            assert len(history) == 2 + TAIL, "the tail must replay verbatim, nothing compressed"
    return {size: statistics.median(times) for size, times in samples.items()}


def append_rate(keep: Chatkeep, count: int) -> float:
    session = keep.sessions.create(Ref("organization", 1))
    start = time.perf_counter()
    for i in range(count):
        session.add_user(f"append {i}")
    return count / (time.perf_counter() - start)


def run(url: str, label: str, calls: int, appends: int) -> None:
    keep = Chatkeep(url, config={"memory": {"distil_on_compress": False}})
    print(f"\n### {label}\n")
    print("| messages in session | median build_history | ratio to 100 |")
    print("|---:|---:|---:|")
    medians = time_builds(keep, {size: seed_session(keep, size) for size in SIZES}, calls)
    base = medians[SIZES[0]]
    for size in SIZES:
        print(f"| {size:,} | {medians[size] * 1000:.3f} ms | {medians[size] / base:.2f}x |")
    print(f"\nappend throughput: {append_rate(keep, appends):,.0f} messages/s "
          f"({appends} single-message transactions)")
    keep.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-dir", type=Path, default=None)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--postgres", default=None, help="also run on this PostgreSQL URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db_dir = args.db_dir or Path(tmp)
        run(f"sqlite:///{db_dir / 'bench-history.db'}", "SQLite (file, WAL)", args.calls,
            args.appends)
    if args.postgres:
        from chatkeep.testing.postgres import scratch_schema

        with scratch_schema(args.postgres, "ck_bench") as url:
            run(url, "PostgreSQL", args.calls, args.appends)


if __name__ == "__main__":
    main()
