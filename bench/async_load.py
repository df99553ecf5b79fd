"""Async turns on one event loop vs the sync API, and chatkeep's Agents SDK session vs
the SDK's own ``SQLAlchemySession``, on PostgreSQL and SQLite, in one run.

    python bench/async_load.py [--postgres URL] [--seconds 8] [--concurrency 16]

Turns: the request an application serves (``add_user``, ``build_history``,
``add_assistant`` with usage), offline extractive summaries, 6,000-token budget.
``sync`` is one process and one thread looping over its sessions (what ``bench/load.py``
calls N = 1); ``async`` is ``--concurrency`` coroutines on one event loop, one session
each. Agents SDK: per turn ``add_items([user, assistant])`` then ``get_items()`` on a
session already holding 100 or 10,000 items, chatkeep's ``ChatkeepSession`` (a budgeted
history) beside ``SQLAlchemySession`` (every stored item), same database, same loop.
Figures are ratios from one run on one machine; absolute numbers are for context.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chatkeep import Chatkeep, Ref, Usage
from chatkeep.aio import AsyncChatkeep
from load import SYSTEM, text

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CONFIG = {"chat": {"max_history_tokens": 6000}, "memory": {"distil_on_compress": False}}


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def sync_turns(url: str, seconds: float, sessions: int) -> tuple[float, list[float]]:
    rng = random.Random(1)
    with Chatkeep(url, config=CONFIG, dispatcher="inline") as keep:
        open_sessions = [keep.sessions.create(Ref("organization", 1)) for _ in range(sessions)]
        latencies: list[float] = []
        started = time.perf_counter()
        i = 0
        while time.perf_counter() - started < seconds:
            session = open_sessions[i % sessions]
            i += 1
            t = time.perf_counter()
            session.add_user(text(rng, 40, 120))
            keep.compressor.build_history(session, SYSTEM)
            session.add_assistant(text(rng, 120, 300), usage=Usage(500, 200), model="m")
            latencies.append(time.perf_counter() - t)
        return len(latencies) / (time.perf_counter() - started), latencies


async def async_turns(url: str, seconds: float, concurrency: int) -> tuple[float, list[float]]:
    async with AsyncChatkeep(url, config=CONFIG, dispatcher="inline") as keep:
        latencies: list[float] = []
        started = time.perf_counter()

        async def client(n: int) -> None:
            rng = random.Random(n)
            session = await keep.sessions.create(Ref("organization", 1))
            while time.perf_counter() - started < seconds:
                t = time.perf_counter()
                await session.add_user(text(rng, 40, 120))
                await keep.compressor.build_history(session, SYSTEM)
                await session.add_assistant(text(rng, 120, 300), usage=Usage(500, 200),
                                            model="m")
                latencies.append(time.perf_counter() - t)

        await asyncio.gather(*(client(n) for n in range(concurrency)))
        return len(latencies) / (time.perf_counter() - started), latencies


def sdk_items(rng: random.Random) -> list[Any]:
    return [{"role": "user", "content": text(rng, 40, 120)},
            {"id": f"msg_{rng.getrandbits(48):x}", "type": "message", "role": "assistant",
             "status": "completed",
             "content": [{"type": "output_text", "text": text(rng, 120, 300),
                          "annotations": []}]}]


async def per_turn(session: Any, stored: int, turns: int) -> float:
    """Median seconds of add_items([user, assistant]) + get_items() on a session that
    already holds ``stored`` items."""
    rng = random.Random(stored)
    batch: list[Any] = []
    for _ in range(stored // 2):
        batch.extend(sdk_items(rng))
        if len(batch) >= 1000:
            await session.add_items(batch)
            batch = []
    if batch:
        await session.add_items(batch)
    await session.get_items()  # warm up (chatkeep folds the backlog here, once)
    samples = []
    for _ in range(turns):
        t = time.perf_counter()
        await session.add_items(sdk_items(rng))
        await session.get_items()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


async def sdk_sessions(url: str, async_url: str, turns: int) -> dict[int, tuple[float, float]]:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    from chatkeep.integrations.openai_agents import ChatkeepSession

    out: dict[int, tuple[float, float]] = {}
    async with AsyncChatkeep(url, config=CONFIG, dispatcher="inline") as keep:
        for stored in (100, 10_000):
            ours = await ChatkeepSession.open(keep, tenant=Ref("organization", 1))
            theirs = SQLAlchemySession.from_url(f"bench-{stored}-{time.time_ns()}",
                                                url=async_url, create_tables=True)
            mine = await per_turn(ours, stored, turns)
            sdk = await per_turn(theirs, stored, turns)
            await theirs.engine.dispose()
            out[stored] = (mine, sdk)
    return out


def report(label: str, url: str, async_url: str, args: argparse.Namespace) -> None:
    print(f"\n### {label}\n")
    rate, lat = sync_turns(url, args.seconds, args.concurrency)
    arate, alat = asyncio.run(async_turns(url, args.seconds, args.concurrency))
    print("| API | turns/s | p50 | p99 |")
    print("|---|---:|---:|---:|")
    for name, r, samples in (("sync, 1 thread", rate, lat),
                             (f"async, {args.concurrency} on one loop", arate, alat)):
        p50, p99 = percentiles(samples)
        print(f"| {name} | {r:.0f} | {p50 * 1000:.1f} ms | {p99 * 1000:.1f} ms |")
    print(f"\nasync / sync turns/s: **{arate / rate:.2f}x** (target >= 1.5x on PostgreSQL)")
    sdk = asyncio.run(sdk_sessions(url, async_url, args.sdk_turns))
    print("\n| stored items | ChatkeepSession | SQLAlchemySession | SQLAlchemySession / chatkeep |")
    print("|---:|---:|---:|---:|")
    for stored, (mine, theirs) in sdk.items():
        print(f"| {stored:,} | {mine * 1000:.2f} ms | {theirs * 1000:.2f} ms | "
              f"{theirs / mine:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=DEFAULT_PG)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sdk-turns", type=int, default=30)
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    from chatkeep.testing.postgres import scratch_schema

    with scratch_schema(args.postgres, "ck_async_bench") as url:
        report("PostgreSQL", url, url, args)  # psycopg serves both APIs
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.db"
            report("SQLite (file, WAL)", f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}",
                   args)


if __name__ == "__main__":
    main()

