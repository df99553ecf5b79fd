"""Async turns on one event loop vs the sync API, and chatkeep's Agents SDK session vs
the SDK's own ``SQLAlchemySession``, on PostgreSQL and SQLite, in one run.

    python bench/async_load.py [--postgres URL] [--seconds 4] [--rounds 3] [--concurrency 16]
                               [--no-postgres | --no-sqlite] [--markdown]

Turns: the request an application serves (``add_user``, ``build_history``,
``add_assistant`` with usage), 6,000-token budget; summaries offline (extractive, CPU
only) and, in a second table, by a model behind the OpenAI wire that answers in 0.3 s
(``FakeOpenAIServer``; ``openai.OpenAI`` for sync, ``openai.AsyncOpenAI`` for async).
``sync`` is one process and one thread looping over its sessions (what ``bench/load.py``
calls N = 1), on psycopg for PostgreSQL; ``async`` is ``--concurrency`` coroutines on one
event loop, one session each: asyncio's own loop on the async API's default driver (the
target's figure: asyncpg for PostgreSQL), the same on uvloop when installed, and on
PostgreSQL also psycopg's async connection (the driver the async API used before
asyncpg); they alternate, ``--rounds`` runs of each, added up. Agents SDK: per turn
``add_items([user, assistant])`` then ``get_items()`` on a session already holding 100 or
10,000 items, chatkeep's ``ChatkeepSession`` (a budgeted history) beside
``SQLAlchemySession`` (every stored item), same database and async driver, same loop,
taking turns alternately. Figures are ratios from one run on one machine; absolute
numbers are for context. The output is Markdown; ``--markdown`` also makes the lines
under each turns table a list.
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

import _suite  # noqa: F401  (tests/support on the path)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openai

from chatkeep import Chatkeep, Ref, Usage
from chatkeep.aio import AsyncChatkeep
from chatkeep.aio.engine import async_target, async_url
from chatkeep.testing import FakeOpenAIServer, Reply
from load import SYSTEM, text
from support.postgres import with_driver

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
"""No driver named: each API picks its own (sync psycopg, async asyncpg)."""
CONFIG = {"chat": {"max_history_tokens": 6000}, "memory": {"distil_on_compress": False}}
MODEL_SECONDS = 0.3
"""A summarizer call's latency in the model rows (a small hosted model folding ~5k tokens
takes longer; 0.3 s understates what overlapping it is worth)."""
BULLET = {"prefix": ""}
"""What starts each line under a turns table ("- " with ``--markdown``: a list)."""


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def summary_reply(body: dict[str, Any]) -> Reply:
    """The summarizer model: a structured summary after ``MODEL_SECONDS``."""
    return Reply.json({"add": [{"type": "fact", "text": "The client set a point about the "
                                "plan and its budget."}],
                       "narrative": "The client and the assistant planned the work."},
                      delay=MODEL_SECONDS)


def conversation_texts(count: int = 512) -> list[tuple[str, str]]:
    """``count`` (user, assistant) texts, made before any timing so that neither loop
    spends its CPU generating text (both draw from the same pool)."""
    rng = random.Random(1)
    return [(text(rng, 40, 120), text(rng, 120, 300)) for _ in range(count)]


TEXTS = conversation_texts()


def sync_turns(url: str, seconds: float, sessions: int,
               base_url: str | None = None) -> tuple[float, list[float]]:
    """One thread looping over ``sessions``; summaries offline, or by the model at
    ``base_url`` (``openai.OpenAI``)."""
    model = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0) \
        if base_url else None
    with Chatkeep(url, model=model, config=CONFIG, dispatcher="inline") as keep:
        open_sessions = [keep.sessions.create(Ref("organization", 1)) for _ in range(sessions)]
        latencies: list[float] = []
        started = time.perf_counter()
        i = 0
        while time.perf_counter() - started < seconds:
            session = open_sessions[i % sessions]
            question, answer = TEXTS[i % len(TEXTS)]
            i += 1
            t = time.perf_counter()
            session.add_user(question)
            keep.compressor.build_history(session, SYSTEM)
            session.add_assistant(answer, usage=Usage(500, 200), model="m")
            latencies.append(time.perf_counter() - t)
        return len(latencies) / (time.perf_counter() - started), latencies


async def async_turns(url: str, seconds: float, concurrency: int,
                      base_url: str | None = None) -> tuple[float, list[float]]:
    """``concurrency`` coroutines on one loop; summaries offline, or by the model at
    ``base_url`` (``openai.AsyncOpenAI``)."""
    model = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0) \
        if base_url else None
    async with AsyncChatkeep(url, model=model, config=CONFIG, dispatcher="inline") as keep:
        latencies: list[float] = []
        started = time.perf_counter()

        async def client(n: int) -> None:
            session = await keep.sessions.create(Ref("organization", 1))
            i = n * len(TEXTS) // concurrency
            while time.perf_counter() - started < seconds:
                question, answer = TEXTS[i % len(TEXTS)]
                i += 1
                t = time.perf_counter()
                await session.add_user(question)
                await keep.compressor.build_history(session, SYSTEM)
                await session.add_assistant(answer, usage=Usage(500, 200), model="m")
                latencies.append(time.perf_counter() - t)

        await asyncio.gather(*(client(n) for n in range(concurrency)))
        return len(latencies) / (time.perf_counter() - started), latencies


def sdk_items(rng: random.Random) -> list[Any]:
    return [{"role": "user", "content": text(rng, 40, 120)},
            {"id": f"msg_{rng.getrandbits(48):x}", "type": "message", "role": "assistant",
             "status": "completed",
             "content": [{"type": "output_text", "text": text(rng, 120, 300),
                          "annotations": []}]}]


async def fill(session: Any, stored: int) -> random.Random:
    """Store ``stored`` items in ``session`` (batches of 1,000), then read it once (chatkeep
    folds the backlog there, once); returns the generator for the timed turns."""
    rng = random.Random(stored)
    batch: list[Any] = []
    for _ in range(stored // 2):
        batch.extend(sdk_items(rng))
        if len(batch) >= 1000:
            await session.add_items(batch)
            batch = []
    if batch:
        await session.add_items(batch)
    await session.get_items()
    return rng


async def turn(session: Any, rng: random.Random) -> float:
    """Seconds of one turn: ``add_items([user, assistant])`` then ``get_items()``."""
    t = time.perf_counter()
    await session.add_items(sdk_items(rng))
    await session.get_items()
    return time.perf_counter() - t


async def sdk_sessions(url: str, turns: int) -> dict[int, tuple[list[float], list[float]]]:
    """Per stored size, each session's turn times; the two sessions take turns
    alternately, so machine noise hits both alike."""
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    from chatkeep.integrations.openai_agents import ChatkeepSession

    out: dict[int, tuple[list[float], list[float]]] = {}
    async with AsyncChatkeep(url, config=CONFIG, dispatcher="inline") as keep:
        for stored in (100, 10_000):
            ours = await ChatkeepSession.open(keep, tenant=Ref("organization", 1))
            target, connect_args = async_target(url)  # chatkeep's async driver and settings
            theirs = SQLAlchemySession.from_url(
                f"bench-{stored}-{time.time_ns()}", url=target.render_as_string(False),
                engine_kwargs={"connect_args": connect_args}, create_tables=True)
            our_rng, their_rng = await fill(ours, stored), await fill(theirs, stored)
            mine: list[float] = []
            sdk: list[float] = []
            for _ in range(turns):
                mine.append(await turn(ours, our_rng))
                sdk.append(await turn(theirs, their_rng))
            await theirs.engine.dispose()
            out[stored] = (mine, sdk)
    return out


class Tally:
    """Turns, seconds, latencies and this process's CPU seconds, over several runs."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu = 0.0
        self.latencies: list[float] = []

    def run(self, work: Any) -> None:
        """Run ``work()`` (returning turns/s and latencies) and add it up."""
        started = time.process_time()
        rate, samples = work()
        self.cpu += time.process_time() - started
        self.seconds += len(samples) / rate
        self.latencies.extend(samples)

    def figures(self) -> tuple[float, list[float], float]:
        """Turns/s over every run, the latencies, CPU seconds per turn."""
        turns = max(1, len(self.latencies))
        return len(self.latencies) / self.seconds, self.latencies, self.cpu / turns


def uvloop_runner() -> Any:
    """``uvloop.run`` when uvloop is installed (the ``bench`` extra; FastAPI's usual server,
    uvicorn with its standard extras, runs on it), else ``None``."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.run


def async_variants(url: str) -> list[tuple[str, Any, str]]:
    """(label, loop runner, URL) of each async row: the default driver on asyncio (the
    target's figure, first), on uvloop when installed, and for PostgreSQL psycopg's async
    connection on asyncio."""
    driver = async_url(url).get_driver_name()
    variants: list[tuple[str, Any, str]] = [(f"asyncio, {driver}", asyncio.run, url)]
    if (uv := uvloop_runner()) is not None:
        variants.append((f"uvloop, {driver}", uv, url))
    if driver == "asyncpg":
        variants.append(("asyncio, psycopg", asyncio.run, with_driver(url, "psycopg")))
    return variants


def turns_table(url: str, args: argparse.Namespace, base_url: str | None) -> None:
    # Sync and async take turns, ``--rounds`` runs of ``--seconds`` each, so that a slow
    # stretch of the machine falls on both alike rather than on whichever ran then.
    variants = async_variants(url)
    sync = Tally()
    loops = {label: Tally() for label, _, _ in variants}
    for _ in range(args.rounds):
        sync.run(lambda: sync_turns(url, args.seconds, args.concurrency, base_url))
        for label, run, loop_url in variants:
            loops[label].run(lambda run=run, loop_url=loop_url: run(
                async_turns(loop_url, args.seconds, args.concurrency, base_url)))
    rate, lat, cpu = sync.figures()
    rows = [("sync, 1 thread", rate, lat, cpu)]
    rows.extend((f"async, {args.concurrency} on one loop ({label})", *tally.figures())
                for label, tally in loops.items())
    print("| API | turns/s | p50 | p99 | CPU per turn | CPU busy |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r, samples, c in rows:
        p50, p99 = percentiles(samples)
        print(f"| {name} | {r:.0f} | {p50 * 1000:.1f} ms | {p99 * 1000:.1f} ms | "
              f"{c * 1000:.2f} ms | {c * r:.0%} |")
    target, *others = loops
    arate, _, acpu = loops[target].figures()
    dash = BULLET["prefix"]
    print(f"\n{dash}async ({target}) / sync turns/s: **{arate / rate:.2f}x** "
          "(target >= 1.5x on PostgreSQL)")
    for label in others:
        print(f"{dash}async ({label}) / sync turns/s: {loops[label].figures()[0] / rate:.2f}x")
    # One loop is one core: it cannot serve more turns/s than 1 / its CPU per turn, and
    # the sync loop's turns/s is 1 / (its CPU + its waits), so this is the most overlap
    # (of waits with other sessions' work) can give.
    print(f"{dash}one loop's ceiling at the {target} CPU per turn: "
          f"{1 / (acpu * rate):.2f}x\n")


def report(label: str, url: str, args: argparse.Namespace) -> None:
    print(f"\n### {label}\n")
    print("Summaries offline (CPU only: the database is the only wait to overlap):\n")
    turns_table(url, args, None)
    print(f"Summaries by a model over HTTP ({MODEL_SECONDS:g} s a call, the local fake of "
          "the OpenAI API; the sync API waits, the async one serves other sessions):\n")
    with FakeOpenAIServer(responder=summary_reply) as server:
        turns_table(url, args, server.base_url)
    sdk = asyncio.run(sdk_sessions(url, args.sdk_turns))
    print(f"Agents SDK sessions, {args.sdk_turns} turns each, alternating (mean includes "
          "chatkeep's periodic folds):\n")
    print("| stored items | ChatkeepSession p50 / mean | SQLAlchemySession p50 / mean "
          "| SQLAlchemySession / chatkeep, p50 / mean |")
    print("|---:|---:|---:|---:|")
    for stored, (mine, theirs) in sdk.items():
        m50, mmean = statistics.median(mine), statistics.fmean(mine)
        t50, tmean = statistics.median(theirs), statistics.fmean(theirs)
        print(f"| {stored:,} | {m50 * 1000:.2f} / {mmean * 1000:.2f} ms | "
              f"{t50 * 1000:.2f} / {tmean * 1000:.2f} ms | "
              f"{t50 / m50:.2f}x / {tmean / mmean:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=DEFAULT_PG)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sdk-turns", type=int, default=100)
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--markdown", action="store_true",
                        help="the lines under each turns table as a Markdown list")
    args = parser.parse_args()
    if args.markdown:
        BULLET["prefix"] = "- "
    from support.postgres import scratch_schema

    if not args.no_postgres:
        with scratch_schema(args.postgres, "ck_async_bench") as url:
            report("PostgreSQL", url, args)
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.db"
            report("SQLite (file, WAL)", f"sqlite:///{path}", args)


if __name__ == "__main__":
    main()

