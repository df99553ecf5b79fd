"""Helpers for the hardening tests: a seeded database and a dump that shows any change."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import Engine, inspect

from chatkeep import Chatkeep, ChatSession, Ref, ToolCall, Usage
from chatkeep.memory.scopes import Scope, ScopeTarget
from chatkeep.memory.text import content_key
from chatkeep.store.memory_rows import MemoryWrite

ORG = Ref("organization", 7)
ALICE = Ref("user", 3)
MATTER = Ref("matter", "M-1")


def dump(engine: Engine, *, sequences: bool = True) -> dict[str, Any]:
    """Every row of every table (sorted), and on PostgreSQL every sequence's position: a
    refused call must leave all of it exactly as it was (a rolled-back insert would move
    a sequence, so this also shows that nothing was even attempted)."""
    out: dict[str, Any] = {}
    with engine.connect() as conn:
        for name in sorted(inspect(conn).get_table_names()):
            rows = conn.exec_driver_sql(f'SELECT * FROM "{name}"').all()
            out[name] = sorted(repr(tuple(row)) for row in rows)
        if sequences and conn.dialect.name == "postgresql":
            out["<sequences>"] = sorted(conn.exec_driver_sql(
                "SELECT sequencename, last_value FROM pg_sequences "
                "WHERE schemaname = current_schema()").all())
        conn.rollback()
    return out


class WriteWatch:
    """SQLite's ``data_version`` seen from a connection of its own: it moves when any
    other connection commits a change to the file, even one no dump would show."""

    def __init__(self, url: str) -> None:
        self.conn = sqlite3.connect(url.removeprefix("sqlite:///")) \
            if url.startswith("sqlite:///") else None

    def version(self) -> int | None:
        """The current data version (``None`` on PostgreSQL)."""
        if self.conn is None:
            return None
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        """Close the watching connection."""
        if self.conn is not None:
            self.conn.close()


def seed(keep: Chatkeep) -> ChatSession:
    """A session with a bit of everything: user text, an answered and an open tool call,
    billed usage, a summary-free history, a tenant memory and a personal memory."""
    session = keep.sessions.create(ORG, ALICE, MATTER, title="seed", metadata={"k": [1, 2]})
    session.add_user("What does clause 4 say?")
    session.add_assistant(tool_calls=[ToolCall("call-1", "lookup", '{"n": 4}'),
                                      ToolCall("call-open", "lookup", '{"n": 5}')],
                          usage=Usage(12, 3), model="gpt-test")
    session.add_tool_result("call-1", "Clause 4: termination on notice.")
    session.add_tokens(5)
    row = keep.repository.get_session(session.id)
    writes = []
    for scope, text in ((Scope.TENANT, "The firm bills monthly."),
                        (Scope.PERSONAL, "Alice prefers short answers.")):
        target = ScopeTarget(ORG, scope, actor=ALICE if scope is Scope.PERSONAL else None)
        writes.append(MemoryWrite(ORG, scope.value, target.key, target.subject, target.actor,
                                  text, content_key(text)))
    keep.memory.store.writes.commit_distillation(session.id, row.distil_version, row.last_seq,
                                                 writes)
    return session.refresh()
