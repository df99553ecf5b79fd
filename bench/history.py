"""build_history latency by session length, by open turn and wire format; append throughput.

    python bench/history.py [--db-dir DIR] [--calls 1000] [--postgres URL] [--no-sdk]
                            [--markdown]

Sessions of 100, 10,000 and 100,000 messages each have a summary in place with
20 messages after the watermark (what a long-lived session looks like). The
claim under test: a call costs what follows the watermark, not the session's
length, so the 100,000-message session should cost no more than 1.5x the
100-message one.

Agent turns: the same 20-message tail followed by an open turn of 1, 8 and 32 parallel
tool calls (each answered), rendered in each wire format. The claim: converting to the
Responses or Anthropic format adds at most 1.3x to the Chat Completions build of the
same session. Ratios come from one run on one machine, with all cases' calls interleaved;
absolute times are printed for context only.

``--markdown`` adds each claim's figure beside its target under the tables (the output is
Markdown either way); ``--no-sdk`` skips the append comparison with the Agents SDK, which
``bench/append.py`` runs on its own.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import insert, update

import _suite  # noqa: F401  (tests/support on the path)
from chatkeep import Chatkeep, Ref, ToolCall
from chatkeep.store.schema import chat_messages, chat_sessions

SIZES = (100, 10_000, 100_000)
OPEN_CALLS = (0, 1, 8, 32)
FORMATS = ("openai_chat", "openai_responses", "anthropic_messages")
TAIL = 20
SYSTEM = "You are a helpful assistant for a law firm."
LENGTH_TARGET = 1.5
"""The longest session's build_history at most this many times the shortest one's."""
FORMAT_TARGET = 1.3
"""Any wire format's build_history at most this many times Chat Completions'."""


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
    sessions = {size: keep.sessions.get_unscoped(sid) for size, sid in session_ids.items()}
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


def seed_open_turn(keep: Chatkeep, calls: int) -> str:
    """A 100-message session (summary in place) whose last turn is open with ``calls``
    parallel tool calls, every one answered."""
    session = keep.sessions.get_unscoped(seed_session(keep, 100))
    if calls:
        session.add_user("Check every matter's deadline, please.")
        session.add_assistant("Checking them all.", tool_calls=[
            ToolCall(f"call_{i}", "matter_deadline", f'{{"matter": "M-{i}"}}')
            for i in range(calls)])
        for i in range(calls):
            session.add_tool_result(f"call_{i}", f"M-{i}: hearing on 2027-0{1 + i % 9}-15")
    return session.id


def time_formats(keep: Chatkeep, calls: int) -> dict[tuple[int, str], float]:
    """Median build_history per (open-turn size, format), all interleaved."""
    sessions = {n: keep.sessions.get_unscoped(seed_open_turn(keep, n)) for n in OPEN_CALLS}
    cases = [(n, fmt) for n in OPEN_CALLS for fmt in FORMATS]
    for n, fmt in cases * 10:  # warm up
        keep.compressor.build_history(sessions[n], SYSTEM, format=fmt)  # type: ignore[call-overload]
    samples: dict[tuple[int, str], list[float]] = {case: [] for case in cases}
    for _ in range(calls):
        for n, fmt in cases:
            start = time.perf_counter()
            keep.compressor.build_history(sessions[n], SYSTEM, format=fmt)  # type: ignore[call-overload]
            samples[(n, fmt)].append(time.perf_counter() - start)
    return {case: statistics.median(times) for case, times in samples.items()}


def append_rate(keep: Chatkeep, count: int) -> float:
    session = keep.sessions.create(Ref("organization", 1))
    start = time.perf_counter()
    for i in range(count):
        session.add_user(f"append {i}")
    return count / (time.perf_counter() - start)


def verdict(value: float, target: float) -> str:
    """``value`` against an at-most ``target``: "met" or "NOT met"."""
    return f"target <= {target:g}x: {'met' if value <= target else 'NOT met'}"


def run(url: str, label: str, calls: int, appends: int, markdown: bool = False) -> None:
    keep = Chatkeep(url, config={"memory": {"distil_on_compress": False}},
                    dispatcher="inline")
    print(f"\n### {label}\n")
    print("| messages in session | median build_history | ratio to 100 |")
    print("|---:|---:|---:|")
    medians = time_builds(keep, {size: seed_session(keep, size) for size in SIZES}, calls)
    base = medians[SIZES[0]]
    for size in SIZES:
        print(f"| {size:,} | {medians[size] * 1000:.3f} ms | {medians[size] / base:.2f}x |")
    formats = time_formats(keep, max(50, calls // 4))
    print("\n| open turn | " + " | ".join(FORMATS) + " | worst format / openai_chat |")
    print("|---|" + "---:|" * (len(FORMATS) + 1))
    for n in OPEN_CALLS:
        chat = formats[(n, "openai_chat")]
        cells = [f"{formats[(n, f)] * 1000:.3f} ms ({formats[(n, f)] / chat:.2f}x)"
                 for f in FORMATS]
        worst = max(formats[(n, f)] for f in FORMATS) / chat
        label = f"{n} parallel calls" if n else "none (plain)"
        print(f"| {label} | " + " | ".join(cells) + f" | {worst:.2f}x |")
    plain = formats[(0, "openai_chat")]
    print("\nopen turn cost vs plain (openai_chat): " + ", ".join(
        f"{n} calls {formats[(n, 'openai_chat')] / plain:.2f}x" for n in OPEN_CALLS[1:]))
    print(f"\nappend throughput: {append_rate(keep, appends):,.0f} messages/s "
          f"({appends} single-message transactions)")
    if markdown:
        longest = medians[SIZES[-1]] / base
        worst = max(formats[(n, f)] / formats[(n, "openai_chat")]
                    for n in OPEN_CALLS for f in FORMATS)
        print(f"\n- {SIZES[-1]:,} messages / {SIZES[0]} messages: {longest:.2f}x "
              f"({verdict(longest, LENGTH_TARGET)})")
        print(f"- worst format / openai_chat, any open turn: {worst:.2f}x "
              f"({verdict(worst, FORMAT_TARGET)})")
    keep.close()


def append_versus_sdk(appends: int) -> None:
    """Append throughput at matched durability beside the Agents SDK's ``SQLiteSession``
    (the comparison of ``bench/append.py``, run here so one command reports both)."""
    import asyncio
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import append  # the same comparison, defined once

    print("\n### SQLite appends beside the OpenAI Agents SDK's SQLiteSession\n")
    with tempfile.TemporaryDirectory(prefix="chatkeep-append-") as tmp:
        asyncio.run(append.run(Path(tmp), appends, 25))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-dir", type=Path, default=None)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--postgres", default=None, help="also run on this PostgreSQL URL")
    parser.add_argument("--no-sdk", action="store_true",
                        help="skip the append comparison with the Agents SDK (bench/append.py)")
    parser.add_argument("--markdown", action="store_true",
                        help="also print each claim's figure against its target")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db_dir = args.db_dir or Path(tmp)
        run(f"sqlite:///{db_dir / 'bench-history.db'}", "SQLite (file, WAL)", args.calls,
            args.appends, args.markdown)
    if not args.no_sdk:
        append_versus_sdk(args.appends)
    if args.postgres:
        from support.postgres import scratch_schema

        with scratch_schema(args.postgres, "ck_bench") as url:
            run(url, "PostgreSQL", args.calls, args.appends, args.markdown)


if __name__ == "__main__":
    main()
