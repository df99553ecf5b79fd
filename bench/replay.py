"""keep.replay of a turn deep in a 100,000-message session, beside one build_history.

    python bench/replay.py [--messages 100000] [--turns 200] [--calls 300]
                           [--postgres URL] [--db-dir DIR] [--markdown]

A session is seeded with half its ``--messages`` (bulk inserts, a summary in place with 20
messages after its watermark, as ``bench/history.py`` seeds), then ``--turns`` real turns
are recorded on it (append the question, ``build_history`` in each wire format in turn,
append the answer: the offline summarizer folds whenever the budget fills), then the
other half is seeded after them. Each replay rebuilds one of those recorded turns, deep
in the session (about seq 50,000 of 100,000), from the store alone and checks its hash.

Replays and ``build_history`` calls on the same session (its newest turn, the same tail
size) are interleaved one by one, so load from elsewhere falls on both alike; the claim
is the replay's p95 at most 50 ms, and its ratio to one ``build_history``'s p95 is
printed beside it. Every replay must match (the run fails otherwise). The manifests'
sizes (bytes per call) are printed too. SQLite (a file, WAL) always; PostgreSQL with
``--postgres``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select, update

import _suite  # noqa: F401  (tests/support on the path)
from chatkeep import Chatkeep, Ref
from chatkeep.store.replay import turns
from chatkeep.store.schema import (
    chat_messages,
    chat_replay_manifests,
    chat_sessions,
    chat_summary_versions,
)

TENANT = Ref("organization", 1)
SYSTEM = "You are a helpful assistant for a law firm."
FORMATS = ("openai_chat", "openai_responses", "anthropic_messages")
TAIL = 20
TARGET_MS = 50.0
"""The replay's p95, in milliseconds, on this machine."""


def seed(keep: Chatkeep, session_id: str, start: int, count: int) -> None:
    """Bulk-insert messages ``start+1 .. start+count`` and a summary (kept at its version,
    as a fold stores it) with ``TAIL`` messages after its watermark (setup only)."""
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = [
        {"session_id": session_id, "seq": seq, "role": "user" if seq % 2 else "assistant",
         "content": f"message {seq} " + "lorem ipsum dolor " * 10, "tool_calls": None,
         "tool_call_id": None, "name": None, "tokens": 50, "created_at": now, "metadata": {}}
        for seq in range(start + 1, start + count + 1)]
    last = start + count
    with keep.engine.begin() as conn:
        for at in range(0, len(rows), 5000):
            conn.execute(insert(chat_messages), rows[at:at + 5000])
        version = int(conn.execute(select(chat_sessions.c.summary_version).where(
            chat_sessions.c.id == session_id)).scalar_one()) + 1
        summary = f"Earlier (through {last - TAIL}): the client asked about clause 4."
        conn.execute(update(chat_sessions).where(chat_sessions.c.id == session_id).values(
            last_seq=last, summary=summary, summary_watermark=last - TAIL,
            summary_version=version, last_message_at=now))
        conn.execute(insert(chat_summary_versions).values(
            session_id=session_id, tenant_type=TENANT.type, tenant_id=TENANT.id_text,
            tenant_id_int=TENANT.id_is_int, version=version, watermark=last - TAIL,
            summary=summary, created_at=now))


def record_turns(keep: Chatkeep, session_id: str, count: int) -> None:
    """``count`` real turns, each format in turn."""
    session = keep.sessions.get(session_id, TENANT)
    for n in range(count):
        session.add_user(f"Turn {n}: does clause {n % 12} survive termination?")
        build(keep)(session, SYSTEM, format=FORMATS[n % 3])
        session.add_assistant(f"Clause {n % 12} survives for {n % 5 + 1} years (turn {n}).")


def build(keep: Chatkeep) -> Any:
    """``build_history``, called with a format from :data:`FORMATS`."""
    return keep.compressor.build_history


def p95(samples: list[float]) -> float:
    """The 95th percentile (nearest rank)."""
    ordered = sorted(samples)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def run(url: str, label: str, messages: int, count: int, calls: int) -> dict[str, float]:
    keep = Chatkeep(url)
    session = keep.sessions.create(TENANT)
    half = messages // 2
    seed(keep, session.id, 0, half)
    record_turns(keep, session.id, count)
    deep = [t.turn for t in turns(keep.engine, session.id, limit=count)]
    with keep.engine.begin() as conn:
        last = int(conn.execute(select(chat_sessions.c.last_seq).where(
            chat_sessions.c.id == session.id)).scalar_one())
    seed(keep, session.id, last, messages - last)
    session = keep.sessions.get(session.id, TENANT)
    for _ in range(20):  # warm caches and the connection pool
        keep.replay(session, turn=deep[0])
        keep.compressor.build_history(session, SYSTEM)
    replays: list[float] = []
    builds: list[float] = []
    mismatched = 0
    for i in range(calls):
        turn = deep[(i * 7919) % len(deep)]
        start = time.perf_counter()
        result = keep.replay(session, turn=turn)
        replays.append(time.perf_counter() - start)
        mismatched += not result.match
        start = time.perf_counter()
        build(keep)(session, SYSTEM, format=FORMATS[i % 3])
        builds.append(time.perf_counter() - start)
    with keep.engine.begin() as conn:
        sizes = [len(m) for m in conn.execute(select(chat_replay_manifests.c.manifest).where(
            chat_replay_manifests.c.session_id == session.id)).scalars() if m]
        total = int(conn.execute(select(func.count()).select_from(chat_messages).where(
            chat_messages.c.session_id == session.id)).scalar_one())
    keep.close()
    if mismatched:
        raise SystemExit(f"{label}: {mismatched} of {calls} replays did not match")
    figures = {"messages": total, "replay_p50": statistics.median(replays) * 1000,
               "replay_p95": p95(replays) * 1000, "build_p50": statistics.median(builds) * 1000,
               "build_p95": p95(builds) * 1000, "bytes_mean": statistics.mean(sizes),
               "bytes_max": max(sizes), "calls": calls}
    figures["ratio"] = figures["replay_p95"] / figures["build_p95"]
    return figures


def report(label: str, f: dict[str, float], markdown: bool) -> None:
    print(f"### {label}: a session of {f['messages']:,.0f} messages\n")
    print("| call | p50 ms | p95 ms |\n|---|---:|---:|")
    print(f"| keep.replay (a turn at about seq {f['messages'] / 2:,.0f}) | "
          f"{f['replay_p50']:.2f} | {f['replay_p95']:.2f} |")
    print(f"| build_history (its newest turn) | {f['build_p50']:.2f} | {f['build_p95']:.2f} |")
    print(f"\n{f['calls']:.0f} calls each, interleaved; every replay matched its recorded "
          f"hash. Manifest: {f['bytes_mean']:.0f} bytes per call on average, "
          f"{f['bytes_max']:.0f} at most.")
    if markdown:
        verdict = "met" if f["replay_p95"] <= TARGET_MS else "NOT met"
        print(f"\nReplay p95 {f['replay_p95']:.2f} ms (target <= {TARGET_MS:.0f} ms: "
              f"{verdict}), {f['ratio']:.2f}x one build_history's p95.")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--postgres", help="also run on this PostgreSQL URL")
    parser.add_argument("--db-dir", help="where the SQLite file goes (a temporary dir)")
    parser.add_argument("--markdown", action="store_true",
                        help="add each claim's figure beside its target")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.db_dir) as tmp:
        url = f"sqlite:///{Path(tmp) / 'replay.db'}"
        report("SQLite", run(url, "SQLite", args.messages, args.turns, args.calls),
               args.markdown)
    if args.postgres:
        from support.postgres import scratch_schema

        with scratch_schema(args.postgres, "ck_bench") as url:
            report("PostgreSQL", run(url, "PostgreSQL", args.messages, args.turns,
                                     args.calls), args.markdown)
    load = os.getloadavg()
    print(f"Load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"({os.cpu_count()} cores).")


if __name__ == "__main__":
    main()
