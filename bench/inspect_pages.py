"""How fast the inspector's pages come back from the real server, on a store with a
100,000-message session and 10,000 sessions, on SQLite and on PostgreSQL.

    python bench/inspect_pages.py [--backend sqlite|postgresql|both] [--messages 100000]
                                  [--sessions 10000] [--repeat 9] [--pg-url URL]
                                  [--markdown]

The store is written through the public API (``sessions.open``, ``add_drafts`` in batches
of 1,000, ``record_usage``; offline extractive summaries): 10,000 sessions across 50
tenants with two messages and one ledger row each, and one support session of
``--messages`` messages (a tool call and its result every 50 messages) that
``build_history`` has folded once, as an application's next call would. Then
``chatkeep inspect`` serves it on a free loopback port, and each page is requested
``--repeat`` times over HTTP after one warm-up request; the figures are the median and
the slowest, in milliseconds, as the client measures them (server, network stack,
response body). The first screen of a page is its HTML as served: for a session, the
header and the newest window of its log (the dry run follows in its own request, shown
apart as ``preview``). Target: under 300 ms for the sessions list and for the first
screen of the long session. ``--markdown`` prints one Markdown table per backend on
stdout (progress goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import httpx

import _suite  # noqa: F401  (tests/support on the path)
from chatkeep import Chatkeep, Ref
from chatkeep.messages import MessageDraft, Role, ToolCall, Usage
from support.postgres import scratch_schema

TARGET_MS = 300.0
FIRST_SCREENS = ("sessions list", "session first screen")
BATCH = 1000
SETTINGS = {"chat": {"max_history_tokens": 6000}, "memory": {"distil_on_compress": False}}


def drafts(start: int, count: int) -> list[MessageDraft]:
    """Messages ``start`` .. ``start + count - 1`` of the long session: user and assistant
    turns, and every 50th pair a tool call answered by its result."""
    out: list[MessageDraft] = []
    n = start
    while len(out) < count:
        if n % 50 == 0 and count - len(out) >= 4:
            call = ToolCall(f"call_{n}", "lookup_order", json.dumps({"order": n}))
            out += [MessageDraft(Role.USER, f"Where is order {n}?"),
                    MessageDraft(Role.ASSISTANT, None, (call,)),
                    MessageDraft(Role.TOOL, json.dumps({"order": n, "status": "shipped"}),
                                 tool_call_id=call.id),
                    MessageDraft(Role.ASSISTANT, f"Order {n} has shipped.")]
            n += 4
            continue
        role = Role.USER if n % 2 == 0 else Role.ASSISTANT
        out.append(MessageDraft(role, f"message {n}: the customer and the agent talk about "
                                      f"the delivery of parcel {n % 977} to the warehouse."))
        n += 1
    return out


def build(url: str, messages: int, sessions: int, progress: TextIO = sys.stdout) -> str:
    """Write the store; returns the long session's id."""
    settings = {**SETTINGS, "store": {"sqlite_synchronous": "OFF"}} \
        if url.startswith("sqlite") else SETTINGS
    keep = Chatkeep(url, config=settings, dispatcher="inline")
    started = time.perf_counter()
    try:
        big = keep.sessions.open("support-long", tenant=Ref("organization", 1),
                                 actor=Ref("user", 1), title="A very long support chat")
        written = 0
        while written < messages:
            batch = drafts(written, min(BATCH, messages - written))
            big.add_drafts(batch)
            written += len(batch)
        big.record_usage("chat", Usage(5000, 400), "gpt-4o-mini")
        keep.compressor.build_history(big, "You are a support agent.")
        print(f"  long session: {written:,} messages, watermark "
              f"{big.refresh().summary_watermark:,} ({time.perf_counter() - started:.0f}s)",
              flush=True, file=progress)
        for n in range(sessions - 1):
            s = keep.sessions.open(f"chat-{n}", tenant=Ref("organization", n % 50),
                                   actor=Ref("user", n % 700))
            s.add_drafts([MessageDraft(Role.USER, f"hello {n}"),
                          MessageDraft(Role.ASSISTANT, f"hi {n}, how can I help?")])
            s.record_usage("chat", Usage(100 + n % 40, 20), "gpt-4o-mini")
        print(f"  {sessions:,} sessions ({time.perf_counter() - started:.0f}s)", flush=True,
              file=progress)
        return big.id
    finally:
        keep.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def server(url: str, log: TextIO | None = None) -> Iterator[str]:
    """``chatkeep inspect`` on a free loopback port (stopped on exit)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATKEEP_")}
    env.update({"CHATKEEP_CHAT__MAX_HISTORY_TOKENS": "6000"})
    command = [str(Path(sys.executable).parent / "chatkeep"), "inspect", "--db", url,
               "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"chatkeep inspect did not start ({process.returncode})") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=20)


def timed(http: httpx.Client, path: str, repeat: int) -> tuple[float, float, int]:
    """Median and slowest milliseconds of ``repeat`` requests (after one warm-up), and the
    body's size."""
    first = http.get(path)
    if first.status_code != 200:
        raise SystemExit(f"{path}: HTTP {first.status_code}: {first.text[:300]}")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = http.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return statistics.median(times), max(times), len(first.content)


def measure(url: str, big: str, repeat: int,
            log: TextIO | None = None) -> list[tuple[str, float, float, int]]:
    with server(url, log) as base, httpx.Client(base_url=base, timeout=60) as http:
        listing = http.get("/sessions").text
        cursor = re.search(r'class="next" href="/sessions\?after=([^"&]+)"', listing)
        pages = {
            "sessions list": "/sessions",
            "sessions list, page 2 (keyset)": f"/sessions?after={cursor.group(1)}"
            if cursor else "/sessions",
            "sessions of one tenant": "/sessions?tenant=organization:7",
            "sessions by tokens": "/sessions?sort=tokens",
            "sessions with an open turn": "/sessions?state=open",
            "session first screen": f"/sessions/{big}",
            "session log, a middle window": f"/sessions/{big}?after=50000",
            "preview (dry run, openai_chat)": f"/sessions/{big}/preview",
            "summary and folds": f"/sessions/{big}/summary",
            "usage": "/usage",
            "usage of the long session": f"/usage?session={big}",
        }
        return [(name, *timed(http, path, repeat)) for name, path in pages.items()]


def markdown_table(backend: str, rows: list[tuple[str, float, float, int]],
                   args: argparse.Namespace) -> list[str]:
    """Print ``rows`` as a Markdown table; returns the first screens over the target."""
    slow = []
    print(f"\n### {backend}: {args.sessions:,} sessions, one of {args.messages:,} messages\n")
    print(f"| page | median ms | slowest ms (of {args.repeat}) | body KiB | "
          f"target (< {TARGET_MS:.0f} ms) |")
    print("|---|---:|---:|---:|---|")
    for name, median, worst, size in rows:
        mark = ""
        if name in FIRST_SCREENS:
            mark = "met" if median < TARGET_MS else "**NOT met**"
            if median >= TARGET_MS:
                slow.append(f"{backend} {name}")
        print(f"| {name} | {median:.1f} | {worst:.1f} | {size / 1024:.1f} | {mark} |")
    print(flush=True)
    return slow


@contextmanager
def store(backend: str, pg_url: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/inspect-bench.db"
    else:
        with scratch_schema(pg_url, prefix="ckbench") as url:
            yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown tables on stdout (progress on stderr)")
    args = parser.parse_args()
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    progress = sys.stderr if args.markdown else sys.stdout
    slow = []
    for backend in backends:
        with store(backend, args.pg_url) as url:
            print(f"{backend}: writing the store", flush=True, file=progress)
            big = build(url, args.messages, args.sessions, progress)
            # the server's own log must not mix into the Markdown on stdout
            rows = measure(url, big, args.repeat, sys.stderr if args.markdown else None)
        if args.markdown:
            slow += markdown_table(backend, rows, args)
            continue
        print(f"\n{backend}: {args.sessions:,} sessions, one of {args.messages:,} messages "
              f"(median / slowest of {args.repeat}, ms; body size)")
        for name, median, worst, size in rows:
            mark = ""
            if name in FIRST_SCREENS:
                mark = "  ok (< 300)" if median < TARGET_MS else "  SLOW (target 300)"
                if median >= TARGET_MS:
                    slow.append(f"{backend} {name}")
            print(f"  {name:<34} {median:8.1f} {worst:8.1f}  {size / 1024:7.1f} KiB{mark}")
        print(flush=True)
    if slow:
        raise SystemExit(f"over the target: {', '.join(slow)}")


if __name__ == "__main__":
    main()
