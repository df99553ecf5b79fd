"""Export and import of a whole database: time, peak memory, rows/s, beside the stores' own tools.

    python bench/dump.py [--messages 20000,100000] [--million] [--postgres URL] [--markdown]

For each store and size, a database of that many messages (fifty per session, each
session with its usage line, so every session is consistent) is exported by ``chatkeep
export`` and imported into an empty database by ``chatkeep import``, each in a process
of its own that reports its own peak resident memory (``ru_maxrss``, the interpreter and
chatkeep's imports included) and the seconds from its first read to its last write. Beside them,
in the same run, the store's own tools do the same job on the same data (timed as whole
processes, peak memory from GNU ``time``): ``sqlite3 FILE
.dump`` and ``sqlite3 NEW < dump.sql`` on SQLite, ``pg_dump`` and ``psql -f`` (into a
fresh database) on PostgreSQL. Read the ratios: chatkeep's import checks every row and
writes in one transaction; the tools trust their input.

The claim under test is flat memory: an export streams (a server-side cursor on
PostgreSQL) and an import holds one batch, so peak RSS at the largest size stays close
to the smallest's (the ratio is printed under each table). ``--million`` adds a run at
1,000,000 messages (several minutes per store).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PER_SESSION = 50
TEXT = "a question about the order, the invoice and the delivery date " * 3


def seed(url: str, messages: int) -> None:
    """``messages`` messages in sessions of ``PER_SESSION``, inserted in bulk."""
    from chatkeep import Chatkeep, Ref
    from chatkeep.store.schema import chat_messages, chat_sessions, chat_usage, ref_values

    start = datetime(2026, 1, 1, tzinfo=UTC)
    with Chatkeep(url) as keep, keep.engine.begin() as conn:
        keep.sessions.list(Ref("organization", 1))  # creates the schema
        sessions: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        usage: list[dict[str, Any]] = []
        for n in range(messages // PER_SESSION):
            tenant = ref_values("tenant", Ref("organization", n % 100))
            sid = str(uuid.UUID(int=n + 1, version=4))
            sessions.append({
                "id": sid, **tenant, **ref_values("actor", None),
                **ref_values("subject", None), "title": f"s{n}", "anonymize_pii": True,
                "total_tokens": 1000, "last_seq": PER_SESSION, "summary": None,
                "summary_watermark": 0, "summary_version": 0, "distilled_through": 0,
                "distil_version": 0, "distil_lease_until": None, "pii_vault": None,
                "pii_vault_version": 0, "pii_protected": False, "closed_at": None,
                "last_message_at": start, "created_at": start, "metadata": {}, "key": None,
                "fold_lease_until": None, "fold_failures": 0, "fold_retry_at": None})
            usage.append({"session_id": sid, **tenant, "purpose": "chat", "model": "m",
                          "prompt_tokens": 900, "completion_tokens": 100, "created_at": start})
            for seq in range(1, PER_SESSION + 1):
                rows.append({"session_id": sid, "seq": seq,
                             "role": "user" if seq % 2 else "assistant",
                             "content": f"{seq} {TEXT}", "tool_calls": None,
                             "tool_call_id": None, "name": None, "tokens": 40,
                             "created_at": start + timedelta(seconds=seq), "metadata": {},
                             "native": None, "retracted_at": None})
            if len(rows) >= 20_000:
                conn.execute(chat_sessions.insert(), sessions)
                conn.execute(chat_messages.insert(), rows)
                conn.execute(chat_usage.insert(), usage)
                sessions, rows, usage = [], [], []
        if sessions:
            conn.execute(chat_sessions.insert(), sessions)
            conn.execute(chat_messages.insert(), rows)
            conn.execute(chat_usage.insert(), usage)


def child(argv: list[str]) -> None:
    """Run one export or import in this process and print what it took: its seconds
    (from the first byte read to the last written) and its own peak RSS."""
    import resource

    from chatkeep import Chatkeep
    from chatkeep.store.dump import dump_lines, restore_file, write_dump
    from chatkeep.store.migrate import head_revision

    what, url, path = argv
    with Chatkeep(url) as keep:
        keep.repository.count_vaults()  # opened and checked before the clock starts
        began = time.perf_counter()
        if what == "export":
            rows = write_dump(dump_lines(keep.engine, head_revision()), path) - 2
        else:
            rows = sum(restore_file(keep.engine, path, head_revision()).values())
        seconds = time.perf_counter() - began
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "rows": rows, "rss_mib": rss}))


def measured(command: list[str], *, stdin: Path | None = None,
             stdout: Path | None = None) -> tuple[float, float, str]:
    """Run ``command`` under GNU time: its seconds, its peak RSS in MiB (the command's
    own, not this process's image a fork would copy), and what it printed."""
    handle, report = tempfile.mkstemp(suffix=".time")
    os.close(handle)
    began = time.perf_counter()
    with open(stdin or os.devnull, "rb") as src, \
            open(stdout, "wb") if stdout else tempfile.TemporaryFile() as out:
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", report, *command],
                              stdin=src, stdout=out, stderr=subprocess.PIPE, check=False)
        seconds = time.perf_counter() - began
        if done.returncode != 0:
            sys.exit(f"{command[0]} failed: {done.stderr.decode()[-2000:]}")
        printed = ""
        if not stdout:
            out.seek(0)
            printed = out.read().decode()
    rss = int(Path(report).read_text().split()[-1]) / 1024
    os.unlink(report)
    return seconds, rss, printed


def chatkeep_run(what: str, url: str, path: Path) -> tuple[float, float, int]:
    """chatkeep's export or import in a process of its own: seconds, peak RSS, rows."""
    _, _, printed = measured([sys.executable, __file__, "--child", what, url, str(path)])
    result = json.loads(printed.strip().splitlines()[-1])
    return float(result["seconds"]), float(result["rss_mib"]), int(result["rows"])


class Store:
    """Where one case's databases live and how the store's own tools copy them."""

    def __init__(self, name: str, root: Path, server: str | None) -> None:
        self.name, self.root, self.server = name, root, server
        self.made: list[str] = []

    def new(self, label: str) -> tuple[str, str]:
        """A fresh empty database: (chatkeep URL, the tool's handle on it)."""
        if self.server is None:
            path = self.root / f"{label}.db"
            return f"sqlite:///{path}", str(path)
        import psycopg

        database = f"ckbench_{label}_{os.getpid()}"
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}"')
            conn.execute(f'CREATE DATABASE "{database}"')
        self.made.append(database)
        base = self.server.rsplit("/", 1)[0]
        return f"{base}/{database}".replace("postgresql://", "postgresql+psycopg://", 1), \
            f"{base}/{database}"

    def tool_export(self, handle: str, out: Path) -> tuple[float, float]:
        if self.server is None:
            seconds, rss, _ = measured(["sqlite3", handle, ".dump"], stdout=out)
        else:
            seconds, rss, _ = measured(["pg_dump", "--no-owner", handle], stdout=out)
        return seconds, rss

    def tool_import(self, handle: str, dump: Path) -> tuple[float, float]:
        if self.server is None:
            seconds, rss, _ = measured(["sqlite3", handle], stdin=dump)
        else:
            seconds, rss, _ = measured(["psql", "-q", "-v", "ON_ERROR_STOP=1",
                                        "-d", handle, "-f", str(dump)])
        return seconds, rss

    def drop(self) -> None:
        if not self.made or self.server is None:
            return
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            for database in self.made:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def run_store(store: Store, sizes: list[int]) -> list[str]:
    out = [f"### {store.name}", "",
           "| messages | dump MiB | export s | export peak RSS MiB | "
           f"{'sqlite3 .dump' if store.server is None else 'pg_dump'} s / RSS MiB | "
           "import rows/s | import peak RSS MiB | "
           f"{'sqlite3 <' if store.server is None else 'psql -f'} rows/s / RSS MiB | "
           "import vs tool |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    peaks: list[tuple[float, float]] = []
    for size in sizes:
        source, source_handle = store.new(f"src{size}")
        seed(source, size)
        dump = store.root / f"{store.name}-{size}.jsonl"
        export_s, export_rss, rows = chatkeep_run("export", source, dump)
        tool_dump = store.root / f"{store.name}-{size}.sql"
        tool_export_s, tool_export_rss = store.tool_export(source_handle, tool_dump)
        target, _ = store.new(f"dst{size}")
        import_s, import_rss, restored = chatkeep_run("import", target, dump)
        assert restored == rows, (restored, rows)
        _, tool_handle = store.new(f"tool{size}")
        tool_import_s, tool_import_rss = store.tool_import(tool_handle, tool_dump)
        peaks.append((export_rss, import_rss))
        rate, tool_rate = rows / import_s, rows / tool_import_s
        out.append(f"| {size:,} | {dump.stat().st_size / 2**20:,.0f} | {export_s:,.1f} | "
                   f"{export_rss:,.0f} | {tool_export_s:,.1f} / {tool_export_rss:,.0f} | "
                   f"{rate:,.0f} | {import_rss:,.0f} | {tool_rate:,.0f} / "
                   f"{tool_import_rss:,.0f} | {rate / tool_rate:.2f}x |")
        for path in (dump, tool_dump):
            path.unlink()
    (small_export, small_import), (big_export, big_import) = peaks[0], peaks[-1]
    out += ["", f"Peak RSS at {sizes[-1]:,} messages over {sizes[0]:,}: export "
            f"{big_export / small_export:.2f}x, import {big_import / small_import:.2f}x "
            f"(data {sizes[-1] / sizes[0]:.0f}x).", ""]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", default="20000,100000",
                        help="comma-separated sizes (default 20000,100000)")
    parser.add_argument("--million", action="store_true", help="add 1,000,000 messages")
    parser.add_argument("--postgres", help="a PostgreSQL URL (its user may create databases)")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--dir", help="where SQLite files and dumps go (default: a temp dir)")
    parser.add_argument("--markdown", action="store_true", help="Markdown (the default)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    sizes = sorted({int(n) for n in args.messages.split(",")} |
                   ({1_000_000} if args.million else set()))
    root = Path(args.dir or tempfile.mkdtemp(prefix="ckdump-"))
    lines = [f"Sizes {', '.join(f'{n:,}' for n in sizes)} messages, {PER_SESSION} per "
             "session; each export and import in its own process.", ""]
    stores = [] if args.no_sqlite else [Store("SQLite", root, None)]
    if args.postgres:
        stores.append(Store("PostgreSQL", root, args.postgres.replace(
            "postgresql+psycopg://", "postgresql://", 1)))
    for store in stores:
        try:
            lines += run_store(store, sizes)
        finally:
            store.drop()
    lines.append(f"Python {platform.python_version()}, sqlite3 "
                 f"{shutil.which('sqlite3') and 'CLI'}, {os.cpu_count()} cores.")
    print("\n".join(lines))
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
