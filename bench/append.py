"""Append throughput on SQLite: chatkeep beside the OpenAI Agents SDK's ``SQLiteSession``.

    pip install -e ".[bench]"      # the SDK, for this benchmark only
    python bench/append.py [--appends 6000] [--block 25] [--dir DIR] [--index-variants]
    python bench/append.py --parts [--rounds 40]   # where an async append's time goes

Both stores write one user message per transaction to one session in a SQLite file in
WAL mode, on the same disk, at matched durability: ``synchronous=FULL`` (every commit
survives power loss; the SDK's default, and chatkeep's ``store.sqlite_synchronous``
default), and again both at ``NORMAL`` (no sync per commit: what each costs in CPU and
writes). The four take turns in blocks of ``--block`` appends, so load on a shared
machine hits all of them alike; each rate is total appends over total time, and each
ratio is against the SDK at the same level, within this run.

The SDK is used as documented: ``await session.add_items([item])`` (its writes run on a
worker thread; that cost is part of its API). chatkeep runs twice at each level: the sync
API, and the async API (``AsyncChatkeep``, whose SQLite writes also cross to a thread:
aiosqlite's), each against the SDK at the same level. ``--index-variants`` adds chatkeep
at each level with the two ``last_message_at`` indexes of ``chat_sessions`` dropped, to
show what rewriting them on every append costs.

Each row gives p50 and p99 of one append beside the rate, and the CPU time the process
spent per append (every thread's, so the SDK's worker thread and aiosqlite's count), with
the SDK's at the same level divided by it: on a busy machine it moves less than the
times do, which also count waiting for a core. On a partly idle VM, a thread
that issues back-to-back fsyncs often waits for the next kernel timer tick, so a median
can sit at exactly one tick (4 ms at Debian's 250 Hz) in one run and well under it in
the next: a p50 within 3 % of a whole number of ticks is flagged ``(at the tick)``, and
such a row measures the machine's timer more than the store. Before the timed run, one untimed block
per store measures what an append costs the database: statements sent to SQLite and WAL
frames (4 KiB pages) written per append. The output is Markdown (``--markdown`` is
accepted, so ``bench/report.py`` calls every bench alike).

``--parts`` times, instead, what an async append is made of, at ``NORMAL`` (CPU, no
fsync), the parts taking turns in blocks: the SDK's ``add_items`` and its write alone on
the calling thread (what its ``asyncio.to_thread`` hop carries), chatkeep's async and sync
``add_user``, chatkeep's four statements alone on a plain ``sqlite3`` connection (SQLite's
own work for an append; the rest of ``add_user`` is chatkeep's Python), and the two hops
with nothing to carry (``asyncio.to_thread``, and one trip to an aiosqlite connection's
thread, which chatkeep's async append makes once). Each is
the median over ``--rounds`` of a block's mean, in microseconds, and against the SDK's
``add_items``: async chatkeep cannot beat the SDK while its sync append plus one trip
costs more than the SDK's whole async append.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite
from sqlalchemy import event

from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep

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
        self.cpu = 0.0
        self.count = 0
        self.latencies: list[float] = []

    async def block(self, n: int, start: int) -> None:
        """Append ``n`` messages, timed (the block, and each append), and the CPU time the
        process spent on them (every thread's: the SDK's worker and aiosqlite's too)."""
        cpu = time.process_time()
        begin = time.perf_counter()
        for i in range(start, start + n):
            one = time.perf_counter()
            if self.is_async:
                await self.append(f"user message {i}: what does clause {i % 40} say?")
            else:
                self.append(f"user message {i}: what does clause {i % 40} say?")
            self.latencies.append(time.perf_counter() - one)
        self.seconds += time.perf_counter() - begin
        self.cpu += time.process_time() - cpu
        self.count += n

    async def probe(self, n: int) -> tuple[float, float]:
        """Statements and WAL frames per append over ``n`` untimed appends."""
        truncate_wal(self.path)
        before = self.statements()
        await self.block(n, 0)
        self.seconds, self.cpu, self.count, self.latencies = 0.0, 0.0, 0, []
        return (self.statements() - before) / n, wal_frames(self.path) / n

    @property
    def rate(self) -> float:
        """Appends per second over the timed run."""
        return self.count / self.seconds

    @property
    def cpu_per_append(self) -> float:
        """CPU seconds per append over the timed run."""
        return self.cpu / self.count

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


#: The indexes of ``chat_sessions`` that every append rewrites (``last_message_at``).
SESSION_TIME_INDEXES = ("ix_chat_sessions_tenant_recent", "ix_chat_sessions_undistilled")


def without_session_time_indexes(path: Path) -> None:
    """Drop the two ``last_message_at`` indexes from a chatkeep file (a variant only)."""
    with sqlite3.connect(path) as conn:
        for name in SESSION_TIME_INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")


def chatkeep_variant(directory: Path, synchronous: str) -> Store:
    """chatkeep (sync API) at ``synchronous`` without the session time indexes."""
    store = chatkeep_store(directory / "no-index", synchronous)
    without_session_time_indexes(store.path)
    store.name = f"chatkeep, no time indexes ({synchronous})"
    return store


async def async_chatkeep_store(directory: Path, synchronous: str) -> Store:
    """chatkeep's async API (aiosqlite) on a fresh file at ``synchronous``."""
    path = directory / f"chatkeep-async-{synchronous.lower()}.db"
    keep = AsyncChatkeep(f"sqlite:///{path}", dispatcher="inline",
                         config={"store": {"sqlite_synchronous": synchronous}})
    counted = [0]

    @event.listens_for(keep.engine.sync_engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        def count(_sql: str) -> None:
            counted[0] += 1

        raw = getattr(dbapi_connection, "driver_connection", dbapi_connection)
        inner = getattr(raw, "_conn", None)  # aiosqlite's sqlite3 connection
        if isinstance(inner, sqlite3.Connection):
            inner.set_trace_callback(count)

    session = await keep.sessions.create(Ref("organization", 1), Ref("user", 1))
    await session.add_user("warm-up")
    return Store(f"chatkeep async ({synchronous})", path, session.add_user, True,
                 lambda: counted[0])


TICK_MS = 4.0
"""Debian's kernel timer tick (CONFIG_HZ=250), unless /boot/config-* says otherwise."""


def kernel_tick_ms() -> float:
    """The kernel's timer tick in milliseconds, from its build config when readable."""
    try:
        config = Path(f"/boot/config-{platform.release()}").read_text()
    except OSError:
        return TICK_MS
    for line in config.splitlines():
        if line.startswith("CONFIG_HZ="):
            return 1000 / int(line.split("=", 1)[1])
    return TICK_MS


def at_the_tick(p50_ms: float, tick_ms: float) -> bool:
    """Whether a median sits on a whole number of timer ticks (within 3 % of one)."""
    ticks = round(p50_ms / tick_ms)
    return ticks >= 1 and abs(p50_ms - ticks * tick_ms) <= 0.03 * tick_ms


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


async def run(directory: Path, appends: int, block: int, index_variants: bool) -> None:
    """Probe, then time the stores in alternating blocks and print the table."""
    (directory / "no-index").mkdir(exist_ok=True)
    levels: dict[str, list[Store]] = {}
    for level in ("FULL", "NORMAL"):
        sdk = sdk_store(directory, level)
        await sdk.append("warm-up")
        levels[level] = [sdk, chatkeep_store(directory, level),
                         await async_chatkeep_store(directory, level)]
        if index_variants:
            levels[level].append(chatkeep_variant(directory, level))
    stores = [store for group in levels.values() for store in group]
    probes = {s.name: await s.probe(100) for s in stores}
    for start in range(0, appends, block):
        for store in stores:
            await store.block(min(block, appends - start), start)
    tick = kernel_tick_ms()
    print(f"{appends} appends per store, one message per transaction, blocks of {block}; "
          f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
          f"{platform.machine()}; kernel tick {tick:g} ms\n")
    print("| store | appends/s | vs SDK, same level | p50 append | p99 append | "
          "CPU/append (SDK's / this) | statements/append | WAL pages/append |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for group in levels.values():
        sdk = group[0]
        for store in group:
            statements, frames = probes[store.name]
            p50 = store.percentile(0.5)
            flag = " (at the tick)" if at_the_tick(p50, tick) else ""
            cpu = store.cpu_per_append
            print(f"| {store.name} | {store.rate:,.0f} | {store.rate / sdk.rate:.2f}x | "
                  f"{p50:.2f} ms{flag} | {store.percentile(0.99):.2f} ms | "
                  f"{cpu * 1e6:,.0f} µs ({sdk.cpu_per_append / cpu:.2f}x) | "
                  f"{statements:.1f} | {frames:.1f} |")
    if any(at_the_tick(s.percentile(0.5), tick) for s in stores):
        print(f"\nA p50 marked (at the tick) sits on a whole number of {tick:g} ms kernel "
              "ticks: its fsyncs waited for the timer, so that row says more about the "
              "machine's state than about the store; rerun, or compare at NORMAL.")


async def parts(directory: Path, rounds: int, block: int) -> None:
    """Time the parts of an async append (``--parts``) at NORMAL and print the table."""
    sdk = sdk_store(directory, "NORMAL")
    chatkeep_sync = chatkeep_store(directory, "NORMAL")
    chatkeep_async = await async_chatkeep_store(directory, "NORMAL")
    raw = await aiosqlite.connect(directory / "trip.db")
    # What chatkeep's async append sends once: a call run in the connection's thread.
    trip: Callable[[Callable[[], None]], Any] = raw._execute
    write_alone = sdk_write_alone(directory)
    statements_alone = chatkeep_statements_alone(directory)

    def nothing() -> None:
        return None

    contenders: dict[str, tuple[Callable[[int], Any], bool]] = {
        "Agents SDK add_items (async)": (lambda i: sdk.append(f"m {i}"), True),
        "Agents SDK, its write alone (no hop)": (write_alone, False),
        "chatkeep async add_user": (lambda i: chatkeep_async.append(f"m {i}"), True),
        "chatkeep sync add_user": (lambda i: chatkeep_sync.append(f"m {i}"), False),
        "chatkeep's statements alone (sqlite3, no hop)": (statements_alone, False),
        "asyncio.to_thread(nothing)": (lambda i: asyncio.to_thread(nothing), True),
        "aiosqlite trip (nothing)": (lambda i: trip(nothing), True),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (call, awaited) in contenders.items():
            begin = time.perf_counter()
            for i in range(block):
                if awaited:
                    await call(i)
                else:
                    call(i)
            times[name].append((time.perf_counter() - begin) / block)
    await raw.close()
    medians = {name: statistics.median(values) for name, values in times.items()}
    sdk_us = medians["Agents SDK add_items (async)"]
    print(f"Parts of an append at NORMAL: median of {rounds} blocks of {block} calls each, "
          f"taking turns; Python {platform.python_version()}, SQLite "
          f"{sqlite3.sqlite_version}, {platform.machine()}\n")
    print("| part | µs per call | time vs SDK add_items |")
    print("|---|---:|---:|")
    for name, seconds in medians.items():
        print(f"| {name} | {seconds * 1e6:,.0f} | {seconds / sdk_us:.2f}x |")


def sdk_write_alone(directory: Path) -> Callable[[int], None]:
    """The SDK's write of one item on the calling thread (what ``add_items`` sends to
    its worker thread): its own connection, insert and commit."""
    kind = type("SdkSessionAlone", (SdkSession,), {"synchronous": "NORMAL", "statements": 0})
    session = kind("alone", directory / "agents-sdk-alone.db")
    if not hasattr(session, "_write_connection") or not hasattr(session, "_insert_items"):
        sys.exit("this Agents SDK has no _write_connection/_insert_items: --parts needs them")

    def write(i: int) -> None:
        with session._write_connection() as conn:
            session._insert_items(conn, [{"role": "user", "content": f"m {i}"}])
            conn.commit()

    return write


def chatkeep_statements_alone(directory: Path) -> Callable[[int], None]:
    """What SQLite does for one chatkeep append, with almost none of chatkeep's Python:
    its four statements (``BEGIN IMMEDIATE``, the seq claim returning the session row, the
    message insert, ``COMMIT``), compiled once, values bound by the same type processors,
    sent by a plain ``sqlite3`` connection with chatkeep's settings to a chatkeep file (no
    pool, no validation, no rows built). The gap to ``add_user`` is chatkeep's Python."""
    from chatkeep.store.direct import compile_for_driver
    from chatkeep.store.rows import SESSION_FIELDS
    from chatkeep.store.statements import CLAIM_SEQ, INSERT_MESSAGE

    path = directory / "chatkeep-statements.db"
    keep = Chatkeep(f"sqlite:///{path}", dispatcher="inline",
                    config={"store": {"sqlite_synchronous": "NORMAL"}})
    session_id = keep.sessions.create(Ref("organization", 1), Ref("user", 1)).id
    dialect = keep.engine.dialect
    keep.close()
    claim = compile_for_driver(CLAIM_SEQ, dialect)
    columns = ["session_id", "seq", "role", "content", "tool_calls", "tool_call_id", "name",
               "tokens", "created_at", "metadata", "native"]
    insert = compile_for_driver(INSERT_MESSAGE, dialect, columns)
    conn = sqlite3.connect(path, isolation_level=None)
    last_seq = SESSION_FIELDS.index("last_seq")
    for pragma in ("synchronous=NORMAL", "foreign_keys=ON", "secure_delete=ON"):
        conn.execute(f"PRAGMA {pragma}")

    def write(i: int) -> None:
        now = datetime.now(UTC)
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(claim.sql, claim.params({
            "b_session_id": session_id, "b_count": 1, "b_now": now,
            "b_billed": 0})).fetchall()[0]
        conn.execute(insert.sql, insert.params({
            "session_id": session_id, "seq": row[last_seq], "role": "user", "content": f"m {i}",
            "tool_calls": None, "tool_call_id": None, "name": None, "tokens": 3,
            "created_at": now, "metadata": {}, "native": None}))
        conn.execute("COMMIT")

    return write


def main() -> None:
    """Parse the arguments and run in a temporary folder (or ``--dir``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=6000)
    parser.add_argument("--block", type=int, default=25)
    parser.add_argument("--dir", type=Path, default=None,
                        help="folder for the database files (default: a temporary one)")
    parser.add_argument("--index-variants", action="store_true",
                        help="also chatkeep without the two last_message_at indexes")
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown output (it is already; for bench/report.py)")
    parser.add_argument("--parts", action="store_true",
                        help="time the parts of an async append instead (at NORMAL)")
    parser.add_argument("--rounds", type=int, default=40,
                        help="blocks per part with --parts")
    args = parser.parse_args()

    def bench(directory: Path) -> None:
        if args.parts:
            asyncio.run(parts(directory, args.rounds, args.block))
        else:
            asyncio.run(run(directory, args.appends, args.block, args.index_variants))

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        bench(args.dir)
        return
    with tempfile.TemporaryDirectory(prefix="chatkeep-append-") as tmp:
        bench(Path(tmp))


if __name__ == "__main__":
    main()
