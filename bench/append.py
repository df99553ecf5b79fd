"""Append throughput on SQLite: chatkeep beside the OpenAI Agents SDK's ``SQLiteSession``.

    pip install -e ".[bench]"      # the SDK, for this benchmark only
    python bench/append.py [--appends 3000] [--block 25] [--dir DIR] [--markdown]

Both stores write one user message per transaction to one session in a SQLite file in
WAL mode, on the same disk, at matched durability: ``synchronous=FULL`` (every commit
survives power loss; the SDK's default, and chatkeep's ``store.sqlite_synchronous``
default), and again both at ``NORMAL`` (no sync per commit: what each costs in CPU and
writes). The four take turns in blocks of ``--block`` appends, so load on a shared
machine hits all of them alike; each rate is total appends over total time, and each
ratio is against the SDK at the same level, within this run.

The SDK is used as documented: ``await session.add_items([item])`` (its writes run on a
worker thread; that cost is part of its API). Before the timed run, one untimed block
per store measures what an append costs the database: statements sent to SQLite and WAL
frames (4 KiB pages) written per append. The output is Markdown (``--markdown`` is
accepted, so ``bench/report.py`` calls every bench alike).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import event

from chatkeep import Chatkeep, Ref

try:
    from agents.memory import SQLiteSession
except ImportError:  # pragma: no cover - the bench extra is missing
    sys.exit('the OpenAI Agents SDK is needed: pip install -e ".[bench]"')


class SdkSession(SQLiteSession):
    """The SDK's session with ``synchronous`` pinned (its default is FULL already) and a
    statement counter for the untimed probe."""

    statements = 0
    synchronous = "FULL"

    @classmethod
    def _configure_connection(cls, conn: sqlite3.Connection) -> None:  # type: ignore[override]
        SQLiteSession._configure_connection(conn)
        conn.execute(f"PRAGMA synchronous={cls.synchronous}")

        def count(_sql: str) -> None:
            cls.statements += 1

        conn.set_trace_callback(count)


def wal_frames(path: Path) -> int:
    """Frames in the WAL since the last checkpoint (a checkpoint that moves nothing)."""
    with sqlite3.connect(path) as conn:
        row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(row[1])


def truncate_wal(path: Path) -> None:
    """Checkpoint and empty the WAL, so the next frames counted are ours."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class Store:
    """One contender: a name, a blocking or awaitable append, its database file."""

    def __init__(self, name: str, path: Path, append: Callable[[str], Any],
                 is_async: bool, statements: Callable[[], int]) -> None:
        self.name, self.path, self.append, self.is_async = name, path, append, is_async
        self.statements = statements
        self.seconds = 0.0
        self.count = 0
        self.latencies: list[float] = []

    async def block(self, n: int, start: int) -> None:
        """Append ``n`` messages, timed (the block, and each append)."""
        begin = time.perf_counter()
        for i in range(start, start + n):
            one = time.perf_counter()
            if self.is_async:
                await self.append(f"user message {i}: what does clause {i % 40} say?")
            else:
                self.append(f"user message {i}: what does clause {i % 40} say?")
            self.latencies.append(time.perf_counter() - one)
        self.seconds += time.perf_counter() - begin
        self.count += n

    async def probe(self, n: int) -> tuple[float, float]:
        """Statements and WAL frames per append over ``n`` untimed appends."""
        truncate_wal(self.path)
        before = self.statements()
        await self.block(n, 0)
        self.seconds, self.count, self.latencies = 0.0, 0, []
        return (self.statements() - before) / n, wal_frames(self.path) / n

    @property
    def rate(self) -> float:
        """Appends per second over the timed run."""
        return self.count / self.seconds

    def percentile(self, q: float) -> float:
        """The ``q`` quantile of one append's time, in milliseconds."""
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def chatkeep_store(directory: Path, synchronous: str) -> Store:
    """chatkeep on a fresh file at ``synchronous``, one session, statement counting."""
    path = directory / f"chatkeep-{synchronous.lower()}.db"
    keep = Chatkeep(f"sqlite:///{path}", dispatcher="inline",
                    config={"store": {"sqlite_synchronous": synchronous}})
    counted = [0]
    keep.engine.dispose()  # reconnect with the tracer installed

    @event.listens_for(keep.engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        def count(_sql: str) -> None:
            counted[0] += 1

        dbapi_connection.set_trace_callback(count)

    session = keep.sessions.create(Ref("organization", 1), Ref("user", 1))
    session.add_user("warm-up")
    return Store(f"chatkeep ({synchronous})", path, session.add_user, False,
                 lambda: counted[0])


def sdk_store(directory: Path, synchronous: str) -> Store:
    """The Agents SDK's ``SQLiteSession`` on a fresh file (WAL) at ``synchronous``."""
    path = directory / f"agents-sdk-{synchronous.lower()}.db"
    kind = type(f"SdkSession{synchronous}", (SdkSession,),
                {"synchronous": synchronous, "statements": 0})
    session = kind("bench", path)

    async def add(text: str) -> None:
        await session.add_items([{"role": "user", "content": text}])

    return Store(f"Agents SDK SQLiteSession ({synchronous})", path, add, True,
                 lambda: int(kind.statements))


async def run(directory: Path, appends: int, block: int) -> None:
    """Probe, then time the stores in alternating blocks and print the table."""
    stores = [chatkeep_store(directory, "FULL"), sdk_store(directory, "FULL"),
              chatkeep_store(directory, "NORMAL"), sdk_store(directory, "NORMAL")]
    for store in stores[1::2]:
        await store.append("warm-up")
    probes = {s.name: await s.probe(100) for s in stores}
    for start in range(0, appends, block):
        for store in stores:
            await store.block(min(block, appends - start), start)
    print(f"{appends} appends per store, one message per transaction, blocks of {block}; "
          f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
          f"{platform.machine()}\n")
    print("| store | appends/s | vs SDK, same level | p50 append | p99 append | "
          "statements/append | WAL pages/append |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for index, store in enumerate(stores):
        statements, frames = probes[store.name]
        sdk = stores[index | 1].rate
        print(f"| {store.name} | {store.rate:,.0f} | {store.rate / sdk:.2f}x | "
              f"{store.percentile(0.5):.2f} ms | {store.percentile(0.99):.2f} ms | "
              f"{statements:.1f} | {frames:.1f} |")


def main() -> None:
    """Parse the arguments and run in a temporary folder (or ``--dir``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=3000)
    parser.add_argument("--block", type=int, default=25)
    parser.add_argument("--dir", type=Path, default=None,
                        help="folder for the database files (default: a temporary one)")
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown output (it is already; for bench/report.py)")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args.dir, args.appends, args.block))
        return
    with tempfile.TemporaryDirectory(prefix="chatkeep-append-") as tmp:
        asyncio.run(run(Path(tmp), args.appends, args.block))


if __name__ == "__main__":
    main()
