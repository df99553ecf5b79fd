"""A lossless copy of what chatkeep stores, as JSON Lines: ``chatkeep export`` / ``import``.

Every row of the sessions, messages, tool calls, usage ledger, folds and memories, column by
column: seqs, times, metadata, retractions, the summary and its watermark, the fold and
distillation state, and each session's placeholder vault still sealed (the key never
leaves with it). Restored into an empty database, on either store, a dump exports again
byte for byte. Derived data is left out and rebuilt: memory vectors (``chatkeep memories
embed``) and the recall cache's stamps.

Line 1 is a header ``{"format": "chatkeep.dump/1", "schema": REVISION}``; then one line
per row, ``{"table": NAME, "row": {COLUMN: VALUE}}``, tables in dependency order and rows
by primary key, keys sorted: the same data gives the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Engine, Table, select, text, update
from sqlalchemy.exc import IntegrityError

from chatkeep.errors import InvalidArgument, StoreError
from chatkeep.refs import Ref
from chatkeep.store.connections import reading, transaction
from chatkeep.store.rows import as_utc
from chatkeep.store.schema import (
    chat_folds,
    chat_messages,
    chat_sessions,
    chat_tool_calls,
    chat_usage,
    memories,
    ref_filter,
)

FORMAT = "chatkeep.dump/1"
TABLES: tuple[Table, ...] = (chat_sessions, chat_messages, chat_tool_calls, chat_usage,
                             chat_folds, memories)
"""What a dump holds, parents first (a restore inserts in this order)."""
_BY_NAME = {table.name: table for table in TABLES}
_SERIAL = ("chat_messages", "chat_usage", "chat_folds", "memories")
"""Tables whose integer ids a PostgreSQL sequence hands out (moved past a restore's)."""


def header(schema: str) -> dict[str, Any]:
    """The first line of a dump."""
    return {"format": FORMAT, "schema": schema}


def dump_lines(engine: Engine, schema: str, tenant: Ref | None = None) -> Iterator[str]:
    """The dump of ``engine``'s database (only ``tenant``'s rows when given), line by
    line, each ending in a newline."""
    yield _line(header(schema))
    with reading(engine, block=True) as conn:
        for table in TABLES:
            query = select(table).order_by(*table.primary_key.columns)
            if tenant is not None:
                query = query.where(_of_tenant(table, tenant))
            for row in conn.execute(query):
                yield _line({"table": table.name, "row": _encoded(table, row._mapping)})


def restore_lines(engine: Engine, lines: Iterable[str], schema: str,
                  progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Insert a dump's rows, in one transaction: all of them or, if any is refused, none.
    The dump must be of this schema revision, and no session it holds may exist already.
    Returns the rows restored per table."""
    rows = list(_parsed(lines, schema))
    counts = {table.name: 0 for table in TABLES}
    superseded: list[tuple[int, int]] = []
    try:
        with transaction(engine) as conn:
            ids = [r["id"] for t, r in rows if t is chat_sessions]
            if ids and conn.execute(select(chat_sessions.c.id).where(
                    chat_sessions.c.id.in_(ids)).limit(1)).first() is not None:
                raise InvalidArgument("the database already holds sessions of this dump; "
                                      "restore into an empty database (chatkeep db upgrade "
                                      "on a new one)")
            for table, row in rows:
                if table is memories and row.get("superseded_by") is not None:
                    superseded.append((row["id"], row["superseded_by"]))
                    row = {**row, "superseded_by": None}  # its successor comes later
                conn.execute(table.insert(), row)
                counts[table.name] += 1
                if progress is not None:
                    progress(1)
            for memory_id, successor in superseded:
                conn.execute(update(memories).where(memories.c.id == memory_id)
                             .values(superseded_by=successor))
            if engine.dialect.name == "postgresql":
                for name in _SERIAL:
                    conn.execute(text(
                        f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                        f"GREATEST((SELECT max(id) FROM {name}), 1))"))
    except IntegrityError as exc:
        raise StoreError(f"the dump conflicts with rows already in the database, so "
                         f"nothing was restored: {exc.orig}") from exc
    return counts


def _parsed(lines: Iterable[str], schema: str) -> Iterator[tuple[Table, dict[str, Any]]]:
    iterator = iter(lines)
    first = next(iterator, "")
    try:
        head = json.loads(first)
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise InvalidArgument(f"line 1: not a chatkeep dump (expected format {FORMAT!r})")
    if head.get("schema") != schema:
        raise InvalidArgument(f"line 1: a dump of schema {head.get('schema')!r}; this "
                              f"database is at {schema!r} (export and import with the "
                              "same chatkeep version)")
    for number, raw in enumerate(iterator, start=2):
        if not raw.strip():
            continue
        problem = f"line {number}: not a row of a chatkeep dump"
        try:
            item = json.loads(raw)
            table = _BY_NAME[item["table"]]
            row = item["row"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(f"{problem} ({type(exc).__name__}: {exc})") from None
        if not isinstance(row, dict) or set(row) != set(table.columns.keys()):
            raise InvalidArgument(f"{problem} (not the columns of {table.name})")
        try:
            yield table, _decoded(table, row)
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"{problem} ({exc})") from None


def _of_tenant(table: Table, tenant: Ref) -> Any:
    if "tenant_type" in table.columns:
        return ref_filter(table, "tenant", tenant)
    return table.c.session_id.in_(
        select(chat_sessions.c.id).where(ref_filter(chat_sessions, "tenant", tenant)))


def _encoded(table: Table, row: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in table.columns:
        value = row[column.name]
        if value is not None and isinstance(column.type, DateTime):
            value = (as_utc(value) or value).isoformat()
        elif value is not None and isinstance(column.type, Boolean):
            value = bool(value)
        out[column.name] = value
    return out


def _decoded(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in row.items():
        kind = table.columns[name].type
        if value is not None and isinstance(kind, DateTime):
            value = datetime.fromisoformat(value)
        elif value is not None and not isinstance(kind, JSON) and isinstance(value,
                                                                             dict | list):
            raise InvalidArgument(f"{table.name}.{name} is not a JSON column")
        out[name] = value
    return out


def _line(item: dict[str, Any]) -> str:
    return json.dumps(item, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"
