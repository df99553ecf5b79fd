"""Code that runs in the spawned worker processes of the PostgreSQL tests.

Kept in its own module so ``multiprocessing`` (spawn) can import it by name in
the child without importing a test module.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from chatkeep import HistoryCompressor
from chatkeep.history import SummaryResult
from chatkeep.messages import Message, Usage
from support.postgres import with_driver

SYSTEM = "You are a careful assistant."
RANGE = re.compile(r"\[(\d+)-(\d+)\]")


class RangeSummarizer:
    """Deterministic: the new summary is the previous one plus ``[first-last]`` of the
    folded seqs, so the stored text records every fold that ever won the compare-and-set.

    With a ``barrier``, the first call in this process waits until every process has
    reached its summarizer, so all of them fold the same range at the same time.
    """

    def __init__(self, barrier: Any = None) -> None:
        self.barrier = barrier
        self.calls = 0

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        self.calls += 1
        if self.barrier is not None and self.calls == 1:
            self.barrier.wait()
        return SummaryResult(f"{previous or ''}[{messages[0].seq}-{messages[-1].seq}]",
                             Usage(10, 5), "range")


def parse_ranges(summary: str | None) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in RANGE.findall(summary or "")]


def compressor(summarizer: RangeSummarizer) -> HistoryCompressor:
    return HistoryCompressor(summarizer, max_history_tokens=1000, recent_messages_min=4,
                             summary_max_tokens=200)


def open_keep(url: str, api: str, **kwargs: Any) -> Any:
    """A ``Chatkeep``, or on an async axis the sync API over ``AsyncChatkeep``."""
    from support.aio import open_on_axis

    return open_on_axis(url, api, **kwargs)


def append_worker(url: str, session_id: str, worker: int, count: int, start: Any,
                  api: str = "sync") -> None:
    """``count`` messages, alternating user and billed assistant turns."""
    keep = open_keep(url, api, create_schema=False)
    try:
        session = keep.sessions.get_unscoped(session_id)
        start.wait()
        for i in range(count):
            if i % 2 == 0:
                session.add_user(f"p{worker}-{i}")
            else:
                session.add_assistant(f"p{worker}-{i}", usage=Usage(3, 2), model="m")
    finally:
        keep.close()


def build_once_worker(url: str, session_id: str, barrier: Any,
                      api: str = "sync") -> tuple[int, list[dict[str, str]]]:
    """One ``build_history`` on an over-budget session, all processes at once."""
    keep = open_keep(url, api, create_schema=False)
    try:
        summarizer = RangeSummarizer()
        session = keep.sessions.get_unscoped(session_id)
        barrier.wait()  # all eight call build_history at once
        history = compressor(summarizer).build_history(session, SYSTEM)
        return summarizer.calls, history
    finally:
        keep.close()


def chat_worker(url: str, session_id: str, worker: int, turns: int, start: Any,
                api: str = "sync") -> tuple[int, list[list[dict[str, str]]]]:
    """A chat loop sharing one session with the other workers: append, then build."""
    keep = open_keep(url, api, create_schema=False)
    try:
        summarizer = RangeSummarizer()
        hc = compressor(summarizer)
        session = keep.sessions.get_unscoped(session_id)
        start.wait()
        histories = []
        for i in range(turns):
            session.add_user(f"W{worker}-{i} " + "words " * 60)
            histories.append(hc.build_history(session, SYSTEM))
        return summarizer.calls, histories
    finally:
        keep.close()


def backend_pid(driver_connection: Any) -> int:
    """The server process behind a driver's connection (psycopg, sync or async; asyncpg)."""
    info = getattr(driver_connection, "info", None)
    return int(info.backend_pid if info is not None else driver_connection.get_server_pid())


def pg_dsn(url: str) -> str:
    """The libpq form of a SQLAlchemy ``postgresql[+driver]://`` URL."""
    return with_driver(url, None)


def open_key_worker(url: str, key: str, barrier: Any, api: str = "sync") -> str:
    """Open one application key at the same moment as the other processes; the id it got."""
    from chatkeep import Ref

    keep = open_keep(url, api, create_schema=False)
    try:
        barrier.wait()
        return str(keep.sessions.open(key, tenant=Ref("organization", 1),
                                      actor=Ref("user", 9)).id)
    finally:
        keep.close()
