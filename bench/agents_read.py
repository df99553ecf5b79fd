"""The Agents SDK's bounded read: ``ChatkeepSession.get_items(limit=20)`` beside the SDK's
own ``SQLiteSession.get_items(limit=20)``, at 100 and 100,000 stored items, in one run.

    pip install -e ".[bench]"      # the SDK, for this benchmark only
    python bench/agents_read.py [--markdown] [--sizes 100,100000] [--limit 20]
                                [--calls 3000] [--block 50] [--synchronous FULL] [--dir DIR]

The read the SDK's runner makes when ``SessionSettings(limit=...)`` bounds what a turn
is sent (issue 37): the newest ``limit`` items, oldest first. Each side holds one session
per size in a SQLite file of its own, in WAL mode, in the same folder (same disk), at the
same ``synchronous`` level (``--synchronous``: the SDK's default FULL, and chatkeep's
``store.sqlite_synchronous`` default; a read syncs nothing, but the level is pinned alike
anyway). Both are seeded untimed with the same items, alternating a user message and an
assistant ``message`` item (the SDK's ``add_items`` in batches; chatkeep's
``ChatkeepSession.add_items`` in the same batches, on ``AsyncChatkeep`` with its default
SQLite driver and summaries offline). Before timing, one read per size checks that both
return the same ``limit`` items.

The SDK is used as documented (``await session.get_items(limit=20)``: one query on a
worker thread). chatkeep: ``await ChatkeepSession(keep, key, tenant=...).get_items(
limit=20)`` on a session that does not redact (a redacting one refuses the read outside
``session.run``). The two take turns in blocks of ``--block`` calls, the block's first
side alternating, garbage collected (untimed) between blocks; each call is timed. The
table gives each side's p50, mean and p90 per call, its CPU time per call (the process's,
every thread's: steadier than wall time on a busy machine), and the ratios SDK / chatkeep
of the p50s, the means and the CPU times at the same size (above ``1.00x``: chatkeep's
read is faster).
Target: ``>= 1.0x`` at both sizes.

``--parts`` times, instead, what one bounded read is made of, at 100 items, the parts
taking turns in blocks: each side's whole ``get_items(limit)``; each side's read alone
on the calling thread (no hop; a connection of the bench's own to each file): the SDK's
statement and its ``json.loads`` of each row, and chatkeep's statement with its rows made
items and judged against the budget, then its statement alone; and the hops with nothing
to carry (``asyncio.to_thread``, the SDK's, and ``AsyncChatkeep.read`` of a procedure
that reads nothing: one trip to the read lane's thread). Each is the median over
``--rounds`` of a block's mean, in microseconds, and against the SDK's ``get_items``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.aio.sessions import core_session
from chatkeep.store.direct import in_thread
from chatkeep.store.executor import Transport
from chatkeep.store.newest import read_newest_rows

try:
    from agents.memory import SQLiteSession

    from chatkeep.integrations.openai_agents import ChatkeepSession
except ImportError:  # pragma: no cover - the bench extra is missing
    sys.exit('the OpenAI Agents SDK is needed: pip install -e ".[bench]"')

ORG = Ref("organization", 1)
SEED_BATCH = 1000
"""Items per ``add_items`` while seeding (both sides)."""


class PinnedSQLiteSession(SQLiteSession):
    """The SDK's session with ``synchronous`` pinned (its default is FULL already)."""

    synchronous = "FULL"

    @classmethod
    def _configure_connection(cls, conn: sqlite3.Connection) -> None:
        SQLiteSession._configure_connection(conn)
        conn.execute(f"PRAGMA synchronous={cls.synchronous}")


def item_pair(index: int) -> list[dict[str, Any]]:
    """The ``index``-th exchange: a user message and the assistant's message item."""
    clause = index % 40
    return [{"role": "user", "content": f"Question {index}: what does clause {clause} of "
                                        "the lease say about notice periods?"},
            {"id": f"msg_{index:08x}", "type": "message", "role": "assistant",
             "status": "completed",
             "content": [{"type": "output_text", "annotations": [],
                          "text": f"Answer {index}: clause {clause} requires written "
                                  "notice thirty days before the end of the term."}]}]


async def seed(add: Callable[[list[Any]], Awaitable[None]], items: int) -> None:
    """``items`` items through ``add``, in batches of ``SEED_BATCH``."""
    batch: list[Any] = []
    for index in range(items // 2):
        batch.extend(item_pair(index))
        if len(batch) >= SEED_BATCH:
            await add(batch)
            batch = []
    if batch:
        await add(batch)


class Side:
    """One contender at one size: its read, and each call's seconds."""

    def __init__(self, name: str, read: Callable[[], Awaitable[list[Any]]]) -> None:
        self.name, self.read = name, read
        self.seconds: list[float] = []
        self.cpu = 0.0

    async def block(self, calls: int) -> None:
        cpu = time.process_time()
        for _ in range(calls):
            started = time.perf_counter()
            await self.read()
            self.seconds.append(time.perf_counter() - started)
        self.cpu += time.process_time() - cpu

    def ms(self, q: float) -> float:
        """The ``q`` quantile of one call, in milliseconds (0.5: the median)."""
        if q == 0.5:
            return 1000 * statistics.median(self.seconds)
        cuts = statistics.quantiles(self.seconds, n=10, method="inclusive")
        return 1000 * cuts[int(q * 10) - 1]

    @property
    def mean_ms(self) -> float:
        return 1000 * statistics.fmean(self.seconds)

    @property
    def cpu_ms(self) -> float:
        """The process's CPU time per call, every thread's (the SDK's worker thread,
        aiosqlite's), in milliseconds: less sensitive to a busy machine than wall time."""
        return 1000 * self.cpu / len(self.seconds)


async def contenders(directory: Path, items: int, limit: int, synchronous: str,
                     keep: AsyncChatkeep) -> tuple[Side, Side]:
    """The SDK's session and chatkeep's, each seeded with ``items`` items, checked to
    return the same newest ``limit``."""
    kind = type(f"SQLiteSession{synchronous}", (PinnedSQLiteSession,),
                {"synchronous": synchronous})
    theirs = kind(f"bench-{items}", directory / f"agents-sdk-{items}.db")
    ours = await ChatkeepSession.open(keep, tenant=ORG, session_id=f"bench-{items}",
                                      anonymize_pii=False)
    started = time.perf_counter()
    await seed(theirs.add_items, items)
    await seed(ours.add_items, items)
    print(f"seeded {items:,} items on each side in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)
    sdk_items, our_items = await theirs.get_items(limit=limit), await ours.get_items(limit)
    if our_items != sdk_items:
        raise SystemExit(f"at {items:,} items the two sessions' newest {limit} differ:\n"
                         f"SDK: {sdk_items[:2]}...\nchatkeep: {our_items[:2]}...")

    async def sdk_read() -> list[Any]:
        items: list[Any] = await theirs.get_items(limit=limit)
        return items

    async def our_read() -> list[Any]:
        return await ours.get_items(limit=limit)

    return (Side("Agents SDK SQLiteSession", sdk_read), Side("ChatkeepSession", our_read))


async def started_keep(directory: Path, synchronous: str) -> AsyncChatkeep:
    """chatkeep's side: an ``AsyncChatkeep`` on the folder's file at ``synchronous``,
    redaction off, its database open."""
    keep = AsyncChatkeep(f"sqlite:///{directory / 'chatkeep.db'}", dispatcher="inline",
                         config={"store": {"sqlite_synchronous": synchronous},
                                 "privacy": {"anonymize_pii": False}})
    return await keep.start()


async def run(directory: Path, sizes: Sequence[int], limit: int, calls: int, block: int,
              synchronous: str) -> None:
    keep = await started_keep(directory, synchronous)
    try:
        pairs = [await contenders(directory, items, limit, synchronous, keep)
                 for items in sizes]
        for sdk, ours in pairs:  # warm-up: connections, caches, code paths
            await sdk.block(50)
            await ours.block(50)
            sdk.seconds, ours.seconds, sdk.cpu, ours.cpu = [], [], 0.0, 0.0
        for index, start in enumerate(range(0, calls, block)):
            n = min(block, calls - start)
            for pair in pairs:
                for side in (pair if index % 2 == 0 else pair[::-1]):
                    gc.collect()
                    await side.block(n)
    finally:
        await keep.close()
    print(f"`get_items(limit={limit})`, {calls:,} calls per side and size in blocks of "
          f"{block}, the sides alternating; SQLite files in WAL mode at "
          f"`synchronous={synchronous}`; Python {platform.python_version()}, SQLite "
          f"{sqlite3.sqlite_version}, {platform.machine()}\n")
    print("| stored items | session | p50 ms | mean ms | p90 ms | CPU ms per call | "
          "SDK / chatkeep p50 | SDK / chatkeep mean | SDK / chatkeep CPU |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for items, (sdk, ours) in zip(sizes, pairs, strict=True):
        for side in (sdk, ours):
            ratios = "| | | |" if side is sdk else (
                f"| {sdk.ms(0.5) / ours.ms(0.5):.2f}x | {sdk.mean_ms / ours.mean_ms:.2f}x | "
                f"{sdk.cpu_ms / ours.cpu_ms:.2f}x |")
            print(f"| {items:,} | {side.name} | {side.ms(0.5):.3f} | {side.mean_ms:.3f} | "
                  f"{side.ms(0.9):.3f} | {side.cpu_ms:.3f} {ratios}")
    worst = min(sdk.ms(0.5) / ours.ms(0.5) for sdk, ours in pairs)
    print(f"\nTarget `>= 1.0x` (SDK / chatkeep p50) at every size: "
          f"{'met' if worst >= 1.0 else 'not met'} (lowest {worst:.2f}x).")


async def parts(directory: Path, limit: int, rounds: int, block: int,
                synchronous: str) -> None:
    """Time the parts of one bounded read (``--parts``) at 100 items; print the table."""
    keep = await started_keep(directory, synchronous)
    try:
        sdk, ours = await contenders(directory, 100, limit, synchronous, keep)
        session = await ChatkeepSession.open(keep, tenant=ORG, session_id="bench-100",
                                             anonymize_pii=False)
        chat = core_session(await session.conversation())
        core = await keep.core()
        judge = functools.partial(session._tail(core, limit).answer, chat.id)
        lane = keep._lane
        if lane is None:
            sys.exit("--parts needs the read lane (SQLite on aiosqlite)")
        ours_alone = in_thread(lane.transport)
        ours_alone.connection = sqlite3.connect(directory / "chatkeep.db",
                                                isolation_level=None)
        theirs_alone = sqlite3.connect(directory / "agents-sdk-100.db")
        sdk_sql = ("SELECT message_data FROM agent_messages WHERE session_id = ? "
                   "ORDER BY id DESC LIMIT ?")

        def sdk_read_alone() -> list[Any]:
            rows = theirs_alone.execute(sdk_sql, ("bench-100", limit)).fetchall()
            return [json.loads(row[0]) for row in reversed(rows)]

        def nothing(transport: Transport) -> None:
            return None

        contenders_: dict[str, tuple[Callable[[], Any], bool]] = {
            f"Agents SDK get_items(limit={limit})": (sdk.read, True),
            "Agents SDK, its statement and json.loads alone (no hop)": (sdk_read_alone, False),
            f"ChatkeepSession get_items(limit={limit})": (ours.read, True),
            "chatkeep, its statement and items alone (no hop)": (
                lambda: read_newest_rows(ours_alone, chat.id, limit, judge), False),
            "chatkeep, its statement alone (no hop)": (
                lambda: read_newest_rows(ours_alone, chat.id, limit, lambda w, r: r), False),
            "asyncio.to_thread(nothing)": (lambda: asyncio.to_thread(lambda: None), True),
            "AsyncChatkeep.read(nothing): one lane trip": (lambda: keep.read(nothing), True),
        }
        times: dict[str, list[float]] = {name: [] for name in contenders_}
        for _ in range(rounds):
            for name, (call, awaited) in contenders_.items():
                gc.collect()
                begin = time.perf_counter()
                for _ in range(block):
                    if awaited:
                        await call()
                    else:
                        call()
                times[name].append((time.perf_counter() - begin) / block)
        ours_alone.connection.close()
        theirs_alone.close()
    finally:
        await keep.close()
    medians = {name: statistics.median(values) for name, values in times.items()}
    whole = medians[f"Agents SDK get_items(limit={limit})"]
    print(f"Parts of `get_items(limit={limit})` at 100 items: median of {rounds} blocks of "
          f"{block} calls each, taking turns; Python {platform.python_version()}, SQLite "
          f"{sqlite3.sqlite_version}, {platform.machine()}\n")
    print("| part | µs per call | time vs the SDK's get_items |")
    print("|---|---:|---:|")
    for name, seconds in medians.items():
        print(f"| {name} | {seconds * 1e6:,.0f} | {seconds / whole:.2f}x |")


def sizes(value: str) -> list[int]:
    return [int(part) for part in value.split(",") if part]


def main() -> None:
    """Parse the arguments and run in a temporary folder (or ``--dir``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=sizes, default=[100, 100_000])
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--synchronous", default="FULL", choices=("FULL", "NORMAL"))
    parser.add_argument("--dir", type=Path, default=None,
                        help="folder for the database files (default: a temporary one)")
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown output (it is already; for bench/report.py)")
    parser.add_argument("--parts", action="store_true",
                        help="time the parts of one bounded read instead (100 items)")
    parser.add_argument("--rounds", type=int, default=40,
                        help="blocks per part with --parts")
    args = parser.parse_args()

    def go(directory: Path) -> None:
        if args.parts:
            asyncio.run(parts(directory, args.limit, args.rounds, args.block,
                              args.synchronous))
            return
        asyncio.run(run(directory, args.sizes, args.limit, args.calls, args.block,
                        args.synchronous))

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        go(args.dir)
        return
    with tempfile.TemporaryDirectory(prefix="chatkeep-agents-read-") as tmp:
        go(Path(tmp))


if __name__ == "__main__":
    main()
