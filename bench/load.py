"""Turn throughput and latency with N worker processes on PostgreSQL (and SQLite at N = 1).

    python bench/load.py [--postgres URL] [--seconds 10] [--workers 1,2,4,8]
                         [--sessions 4] [--budget 6000] [--no-sqlite] [--no-shared]
                         [--markdown]

Each worker is its own process (multiprocessing spawn) with its own ``Chatkeep``
and connection pool, running the turn an application runs per request:

    session.add_user(text)                              # one transaction
    history = keep.compressor.build_history(session)    # read after the watermark,
                                                        # compress when over budget
    session.add_assistant(reply, usage=...)             # one transaction, billed

over its own sessions (round robin) under its own tenant; a second PostgreSQL run
puts every worker's sessions under one shared tenant. Messages are 40-120 word
user turns and 120-300 word replies, the budget is 6,000 tokens, and compression
uses the offline extractive summarizer (no network), so it fires every few turns
per session and its cost is in the numbers. PII redaction runs as configured by
default. Runs use a dedicated PostgreSQL schema, created and dropped here.
``--markdown`` prints only Markdown on stdout (progress goes to stderr).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _suite  # noqa: F401  (tests/support on the path)

SYSTEM = "You are a helpful assistant for a law firm. Answer precisely and cite clauses."
WORDS = [
    "contract", "notice", "clause", "renewal", "termination", "party", "agreement", "payment",
    "invoice", "deadline", "liability", "warranty", "schedule", "amendment", "counsel",
    "review", "draft", "signature", "jurisdiction", "damages", "indemnity", "confidential",
    "delivery", "breach", "remedy", "period",
]
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def text(rng: random.Random, low: int, high: int) -> str:
    n = rng.randint(low, high)
    words = [rng.choice(WORDS) for _ in range(n)]
    for i in range(12, n, 15):  # sentences, so the extractive summarizer has first lines
        words[i] += "."
    return " ".join(words).capitalize() + "."


def settings(budget: int) -> dict[str, Any]:
    return {"chat": {"max_history_tokens": budget},
            "memory": {"distil_on_compress": False}}  # no model: nothing to distil with


def worker(url: str, worker_id: int, tenant_id: int, sessions: int, seconds: float,
           budget: int, start: Any, results: Any) -> None:
    from chatkeep import Chatkeep, Ref
    from chatkeep.history.summarizers import ExtractiveSummarizer
    from chatkeep.messages import Usage

    keep = Chatkeep(url, config=settings(budget), create_schema=False)
    try:
        if not isinstance(keep.compressor.summarizer, ExtractiveSummarizer):
            raise SystemExit("unset OPENAI_* / CHATKEEP_LLM_*: this benchmark runs offline")
        rng = random.Random(worker_id)
        own = [keep.sessions.create(Ref("organization", tenant_id), Ref("user", worker_id),
                                    Ref("matter", f"W{worker_id}-{i}"))
               for i in range(sessions)]

        def turn(n: int) -> None:
            session = own[n % len(own)]
            session.add_user(text(rng, 40, 120))
            history = keep.compressor.build_history(session, SYSTEM)
            prompt = sum(len(m["content"]) for m in history) // 4
            reply = text(rng, 120, 300)
            session.add_assistant(reply, usage=Usage(prompt, len(reply) // 4), model="bench")

        for n in range(2 * sessions):  # warm the pool and the caches
            turn(n)
        start.wait()
        latencies: list[float] = []
        began = time.perf_counter()
        deadline = began + seconds
        n = 0
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            turn(n)
            latencies.append(time.perf_counter() - t0)
            n += 1
        elapsed = time.perf_counter() - began
        compressions = sum(s.refresh().row.summary_version for s in own)
        results.put((latencies, elapsed, compressions))
    finally:
        keep.close()


@dataclass
class Result:
    label: str
    workers: int
    turns: int
    per_second: float
    p50_ms: float
    p99_ms: float
    compressions: int


def run(url: str, label: str, workers: int, shared_tenant: bool, sessions: int,
        seconds: float, budget: int) -> Result:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(url, w, 0 if shared_tenant else w + 1, sessions,
                                              seconds, budget, start, results))
             for w in range(workers)]
    for p in procs:
        p.start()
    start.wait(timeout=120)  # every worker imported, connected and warmed up
    collected = [results.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(30)
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"a worker failed: exit codes {[p.exitcode for p in procs]}")
    latencies = sorted(t for lat, _, _ in collected for t in lat)
    elapsed = max(e for _, e, _ in collected)
    return Result(label, workers, len(latencies), len(latencies) / elapsed,
                  statistics.median(latencies) * 1000,
                  latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
                  sum(c for _, _, c in collected))


def analyze(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
    engine.dispose()


def machine(pg_url: str) -> str:
    ram = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    from sqlalchemy import create_engine

    engine = create_engine(pg_url)
    with engine.connect() as conn:
        version = conn.exec_driver_sql("SHOW server_version").scalar_one()
    engine.dispose()
    return (f"{os.cpu_count()} CPU cores, {ram} RAM, {platform.machine()}, "
            f"Python {platform.python_version()}, PostgreSQL {version} on the same machine")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get("CHATKEEP_BENCH_PG_URL",
                                                             DEFAULT_PG))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--sessions", type=int, default=4, help="sessions per worker")
    parser.add_argument("--budget", type=int, default=6000, help="max_history_tokens")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-shared", action="store_true",
                        help="skip the run where all workers share one tenant")
    parser.add_argument("--markdown", action="store_true",
                        help="only Markdown on stdout (progress on stderr)")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    from chatkeep import Chatkeep
    from support.postgres import scratch_schema

    progress = sys.stderr if args.markdown else sys.stdout
    if args.markdown:
        print(f"Machine: {machine(args.postgres)}; {args.seconds:g} s per run, "
              f"{args.sessions} sessions per worker, budget {args.budget} tokens, "
              "extractive summarizer.\n", flush=True)
    else:
        print(f"machine: {machine(args.postgres)}")
        print(f"command: python {' '.join(sys.argv)}")
        print(f"{args.seconds:g} s per run, {args.sessions} sessions per worker, "
              f"budget {args.budget} tokens, extractive summarizer\n", flush=True)
    results: list[Result] = []
    with scratch_schema(args.postgres, "ck_load") as url:
        Chatkeep(url, config=settings(args.budget)).start().close()  # create the tables once
        # An unmeasured run fills the tables, then ANALYZE gives the planner statistics;
        # without it the first measured run pays for plans made on empty tables.
        run(url, "warm-up", 2, False, args.sessions, min(args.seconds, 5.0), args.budget)
        analyze(url)
        for n in counts:
            results.append(run(url, "PostgreSQL", n, False, args.sessions, args.seconds,
                               args.budget))
            print(f"  PostgreSQL N={n}: {results[-1].per_second:.0f} turns/s", flush=True,
                  file=progress)
        if not args.no_shared:
            n = max(counts)
            results.append(run(url, "PostgreSQL, one shared tenant", n, True, args.sessions,
                               args.seconds, args.budget))
            print(f"  shared tenant N={n}: {results[-1].per_second:.0f} turns/s", flush=True,
                  file=progress)
    sqlite = None
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite_url = f"sqlite:///{Path(tmp) / 'load.db'}"
            Chatkeep(sqlite_url, config=settings(args.budget)).start().close()
            sqlite = run(sqlite_url, "SQLite (file, WAL)", 1, False, args.sessions,
                         args.seconds, args.budget)
        results.append(sqlite)

    pg_one = next((r for r in results if r.label == "PostgreSQL" and r.workers == 1), None)
    print("\n| store | workers | turns | turns/s | p50 turn | p99 turn | compressions |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r.label} | {r.workers} | {r.turns:,} | {r.per_second:,.0f} | "
              f"{r.p50_ms:.1f} ms | {r.p99_ms:.1f} ms | {r.compressions} |")
    if sqlite and pg_one:
        print(f"\nPostgreSQL / SQLite at N = 1: {pg_one.per_second / sqlite.per_second:.2f}x "
              f"turns/s, {pg_one.p50_ms / sqlite.p50_ms:.2f}x p50 latency")


if __name__ == "__main__":
    main()
