"""The lines of a dump, and the checks every value in them passes before a restore.

A dump is JSON Lines: a header ``{"format": FORMAT, "schema": REVISION, "tenant": ...}``,
one line per row ``{"table": NAME, "row": {COLUMN: VALUE}}``, and a trailer
``{"trailer": {"counts": {TABLE: ROWS}, "sha256": HEX}}`` whose digest covers the bytes of
every line before it. A dump without its trailer was cut short; one whose counts or
digest disagree was edited. Both are refused (:class:`chatkeep.errors.InvalidDump`).

Rows carry no surrogate ids: a message is its session and seq, a usage line, a fold or a
lifecycle log line is its place in the dump, so a dump imports into a database that
already holds other tenants (their serial ids would collide). Memories and legal holds,
which other rows name, keep a dump-local number in ``id`` (1, 2, ... in the order they
were written), and ``superseded_by`` / ``hold_id`` hold that number; a restore gives
each its database id. Session and erasure ids are UUIDs and stay.

Every value is checked as the API checks its input (:mod:`chatkeep.validation`): the
type of its column, its length, no NUL character, tz-aware times, JSON objects where the
store keeps objects. No I/O here.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Integer, String, Table, Text

from chatkeep.errors import ChatkeepError, InvalidDump
from chatkeep.refs import Ref
from chatkeep.store.rows import as_utc
from chatkeep.store.schema import (
    chat_checkpoints,
    chat_erased_items,
    chat_erasures,
    chat_folds,
    chat_holds,
    chat_lifecycle_log,
    chat_messages,
    chat_quotas,
    chat_replay_manifests,
    chat_replay_texts,
    chat_reservations,
    chat_retention,
    chat_sessions,
    chat_summary_versions,
    chat_tool_calls,
    chat_usage,
    memories,
    ref_values,
)
from chatkeep.validation import (
    INT32_MAX,
    INT64_MAX,
    check_bool,
    check_int,
    check_metadata,
    check_text,
)

FORMAT = "chatkeep.dump/2"
"""The format a dump's header names (``chatkeep.dump/1`` had no trailer and kept ids)."""
TABLES: tuple[Table, ...] = (chat_sessions, chat_messages, chat_tool_calls, chat_usage,
                             chat_folds, chat_summary_versions, chat_replay_manifests,
                             chat_replay_texts, memories, chat_holds, chat_retention, chat_erasures,
                             chat_erased_items, chat_lifecycle_log, chat_quotas,
                             chat_reservations, chat_checkpoints)
"""What a dump holds, parents first (a restore inserts in this order)."""
DERIVED = ("memory_vectors",)
"""Tables a dump leaves out because they are rebuilt from the others."""
BY_NAME = {table.name: table for table in TABLES}
WITHOUT_ID = frozenset({"chat_messages", "chat_usage", "chat_folds", "chat_lifecycle_log"})
"""Tables whose serial ``id`` a dump leaves out (the importing database hands out its own)."""
NUMBERED = frozenset({"memories", "chat_holds"})
"""Tables whose serial ``id`` other rows name: in a dump it is the row's number (1, 2, ...)."""
NUMBER_REFS = {("memories", "superseded_by"): "memories",
               ("chat_lifecycle_log", "hold_id"): "chat_holds"}
"""Columns naming a row of a numbered table: in a dump they hold its number."""
ROLES = frozenset({"user", "assistant", "tool", "system"})
PURPOSES = frozenset({"chat", "summary", "distil", "manual"})
SCOPES = frozenset({"tenant", "subject", "personal"})
_REFS = {"chat_checkpoints": ("tenant",),
         "chat_sessions": ("tenant", "actor", "subject"), "chat_usage": ("tenant",),
         "memories": ("tenant", "subject", "actor"),
         "chat_holds": ("tenant", "actor", "subject"), "chat_retention": ("tenant",),
         "chat_erasures": ("tenant",), "chat_erased_items": ("tenant",),
         "chat_lifecycle_log": ("tenant",), "chat_quotas": ("tenant", "actor"),
         "chat_reservations": ("tenant",), "chat_summary_versions": ("tenant",),
         "chat_replay_manifests": ("tenant",), "chat_replay_texts": ("tenant",)}


def columns(table: Table) -> frozenset[str]:
    """The keys of a row of ``table`` in a dump."""
    names = frozenset(table.columns.keys())
    return names - {"id"} if table.name in WITHOUT_ID else names


def line(item: Mapping[str, Any]) -> bytes:
    """One canonical line: keys sorted, no spaces, UTF-8, ending in a newline (the same
    data gives the same bytes)."""
    return (json.dumps(item, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            + "\n").encode("utf-8")


def header(schema: str, tenant: Ref | None) -> dict[str, Any]:
    """The first line: the format, the schema revision, and the tenant a tenant's dump
    holds (every row must then be of it)."""
    named = None if tenant is None else {"type": tenant.type, "id": tenant.id_text}
    return {"format": FORMAT, "schema": schema, "tenant": named}


class Digest:
    """The running row counts and SHA-256 of a dump's lines, which its trailer states."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.counts = {table.name: 0 for table in TABLES}

    def add(self, raw: bytes, table: str | None = None) -> None:
        """Count ``raw`` (a whole line, newline included), a row of ``table`` if given."""
        self._hash.update(raw)
        if table is not None:
            self.counts[table] += 1

    def hexdigest(self) -> str:
        """The SHA-256 of every line added so far."""
        return self._hash.hexdigest()

    def trailer(self) -> dict[str, Any]:
        """The last line of a dump of the lines added."""
        return {"trailer": {"counts": dict(self.counts), "sha256": self.hexdigest()}}

    def check(self, trailer: object, number: int) -> None:
        """Refuse a trailer that does not state these counts and this digest."""
        if not isinstance(trailer, dict) or set(trailer) != {"counts", "sha256"}:
            raise InvalidDump(f"line {number}: not a dump's trailer")
        if trailer["counts"] != self.counts:
            raise InvalidDump(f"line {number}: the trailer counts {trailer['counts']}, the "
                              f"dump holds {self.counts}: rows were added or removed")
        if trailer["sha256"] != self.hexdigest():
            raise InvalidDump(f"line {number}: the dump's digest does not match its "
                              "trailer: it was edited after it was written")


def parse_header(raw: bytes, schema: str) -> Ref | None:
    """The tenant line 1 names (``None`` for a whole database); refuses anything but a
    header of this format and schema revision."""
    try:
        head = json.loads(raw)
    except ValueError:
        head = None
    if isinstance(head, dict) and head.get("format") == "chatkeep.dump/1":
        raise InvalidDump("line 1: a dump of format chatkeep.dump/1, which has no trailer "
                          "to prove it complete: export it again with this version")
    if not isinstance(head, dict) or head.get("format") != FORMAT or \
            set(head) != {"format", "schema", "tenant"}:
        raise InvalidDump(f"line 1: not a chatkeep dump (expected format {FORMAT!r})")
    if head["schema"] != schema:
        raise InvalidDump(f"line 1: a dump of schema {head['schema']!r}; this database is "
                          f"at {schema!r} (export and import with the same chatkeep version)")
    named = head["tenant"]
    if named is None:
        return None
    if not isinstance(named, dict) or set(named) != {"type", "id"}:
        raise InvalidDump("line 1: the header's tenant is not {type, id}")
    try:
        return Ref(named["type"], named["id"])
    except ChatkeepError as exc:
        raise InvalidDump(f"line 1: the header's tenant: {exc}") from None


def encoded(table: Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """A database row as the dump writes it (times in UTC ISO 8601, ids left out where
    the importing database gives its own)."""
    out: dict[str, Any] = {}
    keep = columns(table)
    for column in table.columns:
        if column.name not in keep:
            continue
        value = row[column.name]
        if value is not None and isinstance(column.type, DateTime):
            value = (as_utc(value) or value).isoformat()
        elif value is not None and isinstance(column.type, Boolean):
            value = bool(value)
        out[column.name] = value
    return out


def decoded(table: Table, row: object) -> dict[str, Any]:
    """A dump's row as values to insert, each checked as the API checks its input;
    an ``InvalidDump`` names the column."""
    keys, checks = _checks(table.name)
    if not isinstance(row, dict) or row.keys() != keys:
        raise InvalidDump(f"not the columns of {table.name}")
    out: dict[str, Any] = {}
    try:
        for name, check in checks:
            out[name] = check(row[name])
    except ChatkeepError as exc:
        raise InvalidDump(str(exc)) from None
    _check_shape(table, out)
    return out


Check = Callable[[Any], Any]


@functools.cache
def _checks(name: str) -> tuple[frozenset[str], tuple[tuple[str, Check], ...]]:
    """Each column of a dump's row of table ``name`` and its check (built once)."""
    table = BY_NAME[name]
    keys = columns(table)
    return keys, tuple((column.name, _check(column.type, f"{name}.{column.name}",
                                            bool(column.nullable)))
                       for column in table.columns if column.name in keys)


def _json_value(value: Any, where: str) -> Any:
    if isinstance(value, dict | list):
        if value:  # an empty object or list holds nothing to refuse
            check_metadata({"value": value}, where, error=InvalidDump)
    elif isinstance(value, str):
        check_text(value, where, error=InvalidDump)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidDump(f"{where} is {value}, which JSON cannot hold")
    return value


def _time_value(value: Any, where: str) -> Any:
    text = check_text(value, where, error=InvalidDump, max_length=64)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidDump(f"{where} is not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidDump(f"{where} has no time zone: {text!r} (times are tz-aware)")
    return as_utc(moment)


def _typed(kind: Any, where: str) -> Check:
    """The check of a non-null value of a column of type ``kind``."""
    if isinstance(kind, JSON):
        return functools.partial(_json_value, where=where)
    if isinstance(kind, DateTime):
        return functools.partial(_time_value, where=where)
    if isinstance(kind, Boolean):
        return functools.partial(check_bool, field=where, error=InvalidDump)
    if isinstance(kind, Integer):  # BigInteger too
        maximum = INT64_MAX if isinstance(kind, BigInteger) else INT32_MAX
        return functools.partial(check_int, field=where, error=InvalidDump, maximum=maximum)
    if isinstance(kind, String | Text):
        return functools.partial(check_text, field=where, error=InvalidDump,
                                 max_length=kind.length)
    raise InvalidDump(f"{where}: a column of type {kind} has no check")  # a new type


def _check(kind: Any, where: str, nullable: bool) -> Check:
    """The check of one column: its type, its length, null where it may be."""
    typed = _typed(kind, where)

    def check(value: Any) -> Any:
        if value is None:
            if not nullable:
                raise InvalidDump(f"{where} must not be null")
            return None
        return typed(value)

    return check


def _check_shape(table: Table, row: dict[str, Any]) -> None:
    """What a column's type alone does not say: refs, roles, ids, JSON shapes."""
    name = table.name
    if name in NUMBERED and row["id"] < 1:
        raise InvalidDump(f"{name}.id (the dump's own number) must be at least 1")
    for prefix in _REFS.get(name, ()):
        row_ref(row, prefix, f"{name}.{prefix}")
    if name == "chat_sessions":
        try:
            uuid.UUID(row["id"])
        except ValueError:
            raise InvalidDump(f"chat_sessions.id is not a UUID: {row['id']!r}") from None
        if not isinstance(row["metadata"], dict):
            raise InvalidDump("chat_sessions.metadata must be a JSON object")
    elif name == "chat_messages":
        _check_message(row)
    elif name in ("chat_erasures", "chat_lifecycle_log") and \
            not isinstance(row["counts"], dict):
        raise InvalidDump(f"{name}.counts must be a JSON object")
    elif name == "chat_usage" and row["purpose"] not in PURPOSES:
        raise InvalidDump(f"chat_usage.purpose must be one of {sorted(PURPOSES)}, "
                          f"got {row['purpose']!r}")
    elif name == "memories":
        if row["scope"] not in SCOPES:
            raise InvalidDump(f"memories.scope must be one of {sorted(SCOPES)}, "
                              f"got {row['scope']!r}")
        if (row["scope"] == "subject") != (row["subject_type"] is not None) or \
                (row["scope"] == "personal") != (row["actor_type"] is not None) or \
                not row["scope_key"].startswith(row["scope"]):
            raise InvalidDump(f"memories: a {row['scope']} memory with the references or "
                              f"scope key of another scope ({row['scope_key']!r})")
        if row["ttl_seconds"] is not None and (row["ttl_seconds"] < 1
                                               or row["expires_at"] is None):
            raise InvalidDump("memories.ttl_seconds: at least 1, and only on a memory "
                              "that expires (expires_at set)")


def _check_message(row: dict[str, Any]) -> None:
    role = row["role"]
    if role not in ROLES:
        raise InvalidDump(f"chat_messages.role must be one of {sorted(ROLES)}, got {role!r}")
    if row["seq"] < 1:
        raise InvalidDump(f"chat_messages.seq must be at least 1, got {row['seq']}")
    if not isinstance(row["metadata"], dict):
        raise InvalidDump("chat_messages.metadata must be a JSON object")
    if row["native"] is not None and not isinstance(row["native"], dict):
        raise InvalidDump("chat_messages.native must be a JSON object")
    if row["tool_call_id"] is not None and role != "tool":
        raise InvalidDump(f"chat_messages: a {role} message with a tool_call_id")
    calls = row["tool_calls"]
    if calls is None:
        return
    if role != "assistant" or not isinstance(calls, list):
        raise InvalidDump("chat_messages.tool_calls: a list, on assistant messages only")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str) or \
                not call["id"] or not isinstance(function.get("name"), str) or \
                not isinstance(function.get("arguments"), str):
            raise InvalidDump("chat_messages.tool_calls: each call is {id, function: "
                              "{name, arguments}} with strings")


def row_ref(row: Mapping[str, Any], prefix: str, where: str) -> Ref | None:
    """The reference stored in ``row``'s ``<prefix>_type/_id/_id_int`` columns, refused
    unless it is one the API would have stored."""
    kind, text, is_int = (row[f"{prefix}_type"], row[f"{prefix}_id"],
                          row[f"{prefix}_id_int"])
    if kind is None and text is None and is_int is None:
        return None
    try:
        ref = Ref(kind, int(text) if is_int and isinstance(text, str) else text)
    except (ChatkeepError, ValueError, TypeError) as exc:
        raise InvalidDump(f"{where} is not a reference: {exc}") from None
    if ref_values(prefix, ref) != {f"{prefix}_type": kind, f"{prefix}_id": text,
                                   f"{prefix}_id_int": is_int}:
        raise InvalidDump(f"{where} is not a reference the API stores "
                          f"({kind!r}, {text!r}, {is_int!r})")
    return ref
