"""Turns/s on PostgreSQL directly (5432) and through PgBouncer in transaction mode (6432),
both APIs, side by side in one run.

    python bench/pgbouncer.py [--postgres URL] [--pgbouncer URL] [--seconds 3] [--rounds 2]
                              [--concurrency 16] [--markdown]

The turn is ``bench/async_load.py``'s (``add_user``, ``build_history``, ``add_assistant``
with usage; 6,000-token budget, offline extractive summaries): the sync API as one thread
looping over ``--concurrency`` sessions (psycopg), the async API as ``--concurrency``
coroutines on one loop, one session each, on asyncpg and on psycopg's async connection.
Each runs on three routes: directly with prepared statements (the default), directly with
``?prepared_statements=false`` (what the setting itself costs), and through PgBouncer with
``?prepared_statements=false`` (the only way it works there; docs/deploy/pgbouncer.md).
Routes and APIs alternate, ``--rounds`` runs of ``--seconds`` each, added up, so a slow
stretch of the machine falls on all alike. The tables live in a database of their own
(``--database``, created on the server and dropped afterwards), which PgBouncer reaches
by name (``scripts/services.sh`` maps any database name to 127.0.0.1:5432). PgBouncer
runs on the same machine and takes CPU from the same cores; on a 2-core machine that
share is in its figures. ``--markdown`` prints only Markdown on stdout (progress goes to
stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _suite  # noqa: F401  (tests/support on the path)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from async_load import Tally, async_turns, percentiles, sync_turns
from load import machine
from support.postgres import with_driver

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432"
DEFAULT_PGBOUNCER = "postgresql://postgres@127.0.0.1:6432"
OFF = "?prepared_statements=false"
Run = Callable[[str, float], tuple[float, list[float]]]
"""Turns on a URL for some seconds: (turns/s, latencies)."""


@contextmanager
def bench_database(server: str, name: str) -> Iterator[None]:
    """A fresh, empty database ``name`` on ``server`` (dropped on exit, ending the
    sessions PgBouncer still holds on it)."""
    import psycopg

    def run(statement: str) -> None:
        with psycopg.connect(f"{with_driver(server, None)}/postgres", autocommit=True) as conn:
            conn.execute(statement)

    run(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    run(f"CREATE DATABASE {name}")
    try:
        yield
    finally:
        run(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def variants(concurrency: int) -> list[tuple[str, Run]]:
    """(label, run(url, seconds)) of each API row."""
    def sync(url: str, seconds: float) -> tuple[float, list[float]]:
        return sync_turns(url, seconds, concurrency)

    def on_loop(driver: str) -> Run:
        def run(url: str, seconds: float) -> tuple[float, list[float]]:
            return asyncio.run(async_turns(with_driver(url, driver), seconds, concurrency))
        return run

    return [("sync, 1 thread (psycopg)", sync),
            (f"async, {concurrency} on one loop (asyncpg)", on_loop("asyncpg")),
            (f"async, {concurrency} on one loop (psycopg)", on_loop("psycopg"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get("CHATKEEP_BENCH_PG_SERVER",
                                                             DEFAULT_PG),
                        help="the server, without a database name")
    parser.add_argument("--pgbouncer", default=DEFAULT_PGBOUNCER,
                        help="PgBouncer in transaction mode in front of it, no database name")
    parser.add_argument("--database", default="chatkeep_bench_pgbouncer")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--markdown", action="store_true",
                        help="only Markdown on stdout (progress on stderr)")
    args = parser.parse_args()
    from chatkeep import Chatkeep

    direct = f"{args.postgres}/{args.database}"
    routes = {"direct": direct, "direct, prepared_statements=false": direct + OFF,
              "PgBouncer, prepared_statements=false": f"{args.pgbouncer}/{args.database}{OFF}"}
    progress = sys.stderr if args.markdown else sys.stdout
    if args.markdown:
        print(f"Machine: {machine(f'{args.postgres}/postgres')}, PgBouncer on the same "
              f"machine; {args.rounds} x {args.seconds:g} s per cell, {args.concurrency} "
              "sessions, budget 6000 tokens, extractive summarizer.", flush=True)
    else:
        print(f"machine: {machine(f'{args.postgres}/postgres')}, PgBouncer on the same machine")
        print(f"command: python {' '.join(sys.argv)}")
        print(f"{args.rounds} x {args.seconds:g} s per cell, {args.concurrency} sessions, "
              "budget 6000 tokens, extractive summarizer\n", flush=True)
    rows = variants(args.concurrency)
    tallies: dict[tuple[str, str], Tally] = {(r, v): Tally() for r in routes for v, _ in rows}
    with bench_database(args.postgres, args.database):
        Chatkeep(direct).start().close()  # the tables, once
        for url in routes.values():  # unmeasured: connections, plans, a few folds
            for _, run in rows:
                run(url, min(args.seconds, 1.0))
        for round_ in range(args.rounds):
            for route, url in routes.items():
                for label, run in rows:
                    tallies[route, label].run(lambda run=run, url=url: run(url, args.seconds))
            print(f"  round {round_ + 1} of {args.rounds} done", flush=True, file=progress)

    print("\n| API | route | turns/s | p50 | p99 | CPU per turn (client) |")
    print("|---|---|---:|---:|---:|---:|")
    for label, _ in rows:
        for route in routes:
            rate, samples, cpu = tallies[route, label].figures()
            p50, p99 = percentiles(samples)
            print(f"| {label} | {route} | {rate:,.0f} | {p50 * 1000:.1f} ms | "
                  f"{p99 * 1000:.1f} ms | {cpu * 1000:.2f} ms |")
    names = list(routes)
    print(f"\n| API | {' | '.join(names)} | PgBouncer / direct |")
    print(f"|---|{'---:|' * (len(names) + 1)}")
    for label, _ in rows:
        rates: list[Any] = [tallies[route, label].figures()[0] for route in names]
        print(f"| {label} | {' | '.join(f'{r:,.0f}' for r in rates)} | "
              f"{rates[-1] / rates[0]:.2f}x |")


if __name__ == "__main__":
    main()
