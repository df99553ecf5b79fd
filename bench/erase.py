"""Forgetting's costs (issue 36): erasing an actor, and what secure_delete and the ledger
change cost the hot path.

    python bench/erase.py [--messages 10000] [--large] [--postgres URL] [--appends 1500]
                          [--block 100] [--markdown]

**Erase.** One actor with ``--messages`` messages over ten sessions (``--large``: also
100,000), beside another actor with a tenth as many, on SQLite and (with ``--postgres``)
PostgreSQL. The erasure runs in a child process that does nothing else, so its peak RSS
(``ru_maxrss``) is the erasure's own; the row gives its wall time and its peak RSS
beside the peak RSS of a child that only plans the same erasure (reads ids and counts):
that the two stay close, at 10k and at 100k, is what "bounded in batches" means.

**Hot path.** On SQLite, three stores take turns in blocks of ``--block`` turns (one user
message, one assistant message billed with usage): chatkeep as it is (``secure_delete``
on, the ledger without its cascade), the same with ``secure_delete`` off, and the same
with the schema before the ledger change (migration 0011: ``chat_usage`` cascading on
the session) and ``secure_delete`` off, which is chatkeep before issue 36. Each rate is
total turns over total time; the ratios are against the store before, in this run (the
target is at most 1.1x the time per turn). ``build_history`` of a 200-message session
is timed the same way. On PostgreSQL only the ledger change applies (no secure_delete).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, inspect

from chatkeep import Chatkeep, MessageDraft, Ref, Role, Usage
from chatkeep.store import make_engine, migrate
from chatkeep.store.schema import metadata

T, ANN, BOB = Ref("org", 1), Ref("user", "ann"), Ref("user", "bob")
SESSIONS = 10
HISTORY_ROUNDS, HISTORY_BLOCK = 20, 10
"""build_history is timed in rounds of a block per variant, the variants taking turns."""
BEFORE = "before (0011: cascade; secure_delete off)"
CHILD = textwrap.dedent("""
    import resource, sys, time
    from chatkeep import Chatkeep, Ref
    keep = Chatkeep(sys.argv[1])
    keep.start()
    start = time.perf_counter()
    if sys.argv[2] == "erase":
        receipt = keep.erase(Ref("org", 1), actor=Ref("user", "ann"))
        done = receipt.counts["messages"]
    else:
        done = keep.plan_erasure(Ref("org", 1), actor=Ref("user", "ann")).messages
    elapsed = time.perf_counter() - start
    keep.close()
    print(done, elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""")


def plant(url: str, messages: int) -> None:
    """ANN: ``messages`` over SESSIONS sessions; BOB: a tenth as many."""
    keep = Chatkeep(url)
    for actor, total in ((ANN, messages), (BOB, max(1, messages // 10))):
        per = max(1, total // SESSIONS)
        for _ in range(SESSIONS):
            session = keep.sessions.create(T, actor)
            for start in range(0, per, 1000):
                session.add_drafts([MessageDraft(Role.USER, f"message {i} of {actor.id}")
                                    for i in range(start, min(per, start + 1000))])
    keep.close()


def child(url: str, mode: str) -> tuple[int, float, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, url, mode], check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), float(out[1]), int(out[2])


def erase_rows(stores: list[tuple[str, str]], sizes: list[int]) -> list[str]:
    rows = ["| store | messages | erase time (s) | erase peak RSS (MiB) | "
            "plan-only peak RSS (MiB) |", "|---|---:|---:|---:|---:|"]
    for name, make in stores:
        for size in sizes:
            url = fresh(make, name, f"erase{size}")
            plant(url, size)
            _, _, plan_rss = child(url, "plan")
            done, elapsed, rss = child(url, "erase")
            rows.append(f"| {name} | {done:,} | {elapsed:.2f} | {rss / 1024:.0f} | "
                        f"{plan_rss / 1024:.0f} |")
    return rows


_SCHEMAS: list[str] = []


def fresh(base: str, name: str, label: str) -> str:
    """A new database: a SQLite file in a temporary folder, or a PostgreSQL schema."""
    if name == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="ck-erase-"))
        return f"sqlite:///{folder / f'{label}.db'}"
    import psycopg

    schema = f"ck_bench_{label}_{os.getpid()}"
    with psycopg.connect(base.replace("postgresql+psycopg", "postgresql"),
                         autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    _SCHEMAS.append(schema)
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def drop_schemas(base: str) -> None:
    if not _SCHEMAS:
        return
    import psycopg

    with psycopg.connect(base.replace("postgresql+psycopg", "postgresql"),
                         autocommit=True) as conn:
        for schema in _SCHEMAS:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def secure_delete_off(engine: Engine) -> Engine:
    @event.listens_for(engine, "connect")
    def _off(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA secure_delete=OFF")

    return engine


def variant(url: str, *, before: bool, secure: bool) -> Chatkeep:
    engine = make_engine(url)
    if before:
        migrate.upgrade(engine, "0011_fold_history")
        # The tables later migrations add (replay, quotas, checkpoints, the lifecycle's)
        # beside the 0011 schema, for today's code to write: what differs is the ledger.
        existing = set(inspect(engine).get_table_names())
        metadata.create_all(engine, tables=[t for t in metadata.sorted_tables
                                            if t.name not in existing])
    if not secure:
        secure_delete_off(engine)
    return Chatkeep(engine, create_schema=not before)


def hot_path(stores: list[tuple[str, str]], appends: int, block: int) -> list[str]:
    rows = ["| store | variant | turns/s | per turn vs before | build_history (ms) | "
            "build_history vs before |", "|---|---|---:|---:|---:|---:|"]
    for name, base in stores:
        if name == "sqlite":
            variants = {"now (secure_delete on, no cascade)": (False, True),
                        "now, secure_delete off": (False, False),
                        BEFORE: (True, False)}
        else:
            variants = {"now (no cascade)": (False, True), BEFORE: (True, False)}
        keeps = {v: variant(fresh(base, name, f"hot{i}"), before=b, secure=s)
                 for i, (v, (b, s)) in enumerate(variants.items())}
        sessions = {v: k.sessions.create(T, ANN) for v, k in keeps.items()}
        spent = dict.fromkeys(keeps, 0.0)
        done = 0
        while done < appends:
            for v, session in sessions.items():
                start = time.perf_counter()
                for _ in range(block):
                    session.add_user("a question about the invoice")
                    session.add_assistant("an answer", usage=Usage(prompt_tokens=20,
                                                                   completion_tokens=8))
                spent[v] += time.perf_counter() - start
            done += block
        history = dict.fromkeys(keeps, 0.0)
        for v, keep in keeps.items():
            keep.compressor.build_history(sessions[v], "You are helpful.")  # warm
        for _ in range(HISTORY_ROUNDS):  # interleaved, so drift falls on every variant
            for v, keep in keeps.items():
                start = time.perf_counter()
                for _ in range(HISTORY_BLOCK):
                    keep.compressor.build_history(sessions[v], "You are helpful.")
                history[v] += (time.perf_counter() - start) / (HISTORY_ROUNDS * HISTORY_BLOCK)
        before = BEFORE
        for v in keeps:
            rows.append(f"| {name} | {v} | {done / spent[v]:,.0f} | "
                        f"{spent[v] / spent[before]:.2f}x | {history[v] * 1000:.2f} | "
                        f"{history[v] / history[before]:.2f}x |")
        for keep in keeps.values():
            keep.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--large", action="store_true", help="also 100,000 messages")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (psycopg)")
    parser.add_argument("--appends", type=int, default=1500)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    stores = [("sqlite", "sqlite")]
    if args.postgres:
        stores.append(("postgresql", args.postgres))
    sizes = [args.messages] + ([100_000] if args.large else [])
    try:
        lines = ["## Erasing an actor", "", *erase_rows(stores, sizes), "",
                 "## Hot path: secure_delete and the ledger change", "",
                 *hot_path(stores, args.appends, args.block)]
    finally:
        if args.postgres:
            drop_schemas(args.postgres)
    print("\n".join(lines))
    print(f"\nself peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB",
          file=sys.stderr)


if __name__ == "__main__":
    main()
