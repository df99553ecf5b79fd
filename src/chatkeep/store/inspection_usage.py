"""The inspector's reads of the usage ledger: sums by group and over time, the newest
lines, and the ledger reconciled against the sessions' running totals.

Nothing here writes. A tenant given to a filter is part of every ``WHERE`` clause.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Engine, Select, func, literal_column, select

from chatkeep.errors import InvalidArgument
from chatkeep.refs import Ref
from chatkeep.store.connections import reading
from chatkeep.store.rows import as_utc
from chatkeep.store.schema import chat_sessions, chat_usage, ref_filter

_S = chat_sessions.c
_U = chat_usage.c


@dataclass(frozen=True, slots=True)
class UsageFilter:
    """Which ledger rows the usage page reads."""

    tenant: Ref | None = None
    session_id: str | None = None
    purpose: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def where(self) -> list[ColumnElement[bool]]:
        """The ``WHERE`` clauses over ``chat_usage``."""
        out: list[ColumnElement[bool]] = []
        if self.tenant is not None:
            out.append(ref_filter(chat_usage, "tenant", self.tenant))
        if self.session_id is not None:
            out.append(_U.session_id == self.session_id)
        if self.purpose:
            out.append(_U.purpose == self.purpose)
        if self.model:
            out.append(_U.model == self.model)
        if self.since is not None:
            out.append(_U.created_at >= self.since)
        if self.until is not None:
            out.append(_U.created_at < self.until)
        return out


USAGE_GROUPS = ("tenant", "purpose", "model", "session")
BUCKETS = {"hour": ("%Y-%m-%d %H:00", "YYYY-MM-DD HH24:00"),
           "day": ("%Y-%m-%d", "YYYY-MM-DD"),
           "month": ("%Y-%m", "YYYY-MM")}


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One group of the ledger."""

    key: tuple[Any, ...]
    calls: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


def _sums() -> list[Any]:
    return [func.count(), func.coalesce(func.sum(_U.prompt_tokens), 0),
            func.coalesce(func.sum(_U.completion_tokens), 0)]


def _usage_rows(rows: Sequence[Any], width: int) -> list[UsageRow]:
    return [UsageRow(tuple(r[:width]), int(r[width]), int(r[width + 1]), int(r[width + 2]))
            for r in rows]


def usage_by(engine: Engine, f: UsageFilter, group: str, *,
             limit: int | None = None) -> list[UsageRow]:
    """The ledger summed by ``group`` (tenant, purpose, model or session), biggest first.
    A session group's key is (session id, key, title, stored mapping): the mapping masks
    the key and title for display."""
    if group == "tenant":
        columns: list[Any] = [_U.tenant_type, _U.tenant_id]
        query: Select[Any] = select(*columns, *_sums())
    elif group == "session":
        columns = [_U.session_id, _S.key, _S.title, _S.pii_vault]
        query = select(*columns, *_sums()).join(chat_sessions, _S.id == _U.session_id)
    elif group in ("purpose", "model"):
        columns = [_U.purpose if group == "purpose" else _U.model]
        query = select(*columns, *_sums())
    else:
        raise InvalidArgument(f"unknown group {group!r}")
    total = func.coalesce(func.sum(_U.prompt_tokens + _U.completion_tokens), 0)
    query = query.where(*f.where()).group_by(*columns).order_by(total.desc(), *columns)
    if limit is not None:
        query = query.limit(limit)
    with reading(engine) as conn:
        return _usage_rows(conn.execute(query).all(), len(columns))


def usage_over_time(engine: Engine, f: UsageFilter, bucket: str) -> list[UsageRow]:
    """The ledger summed per time bucket (UTC) and purpose, in time order; key = (bucket
    label, purpose)."""
    sqlite_format, pg_format = BUCKETS[bucket]
    if engine.dialect.name == "sqlite":
        label: Any = func.strftime(sqlite_format, _U.created_at)
    else:
        label = func.to_char(func.timezone("UTC", _U.created_at), pg_format)
    label = label.label("bucket")
    query = (select(label, _U.purpose, *_sums()).where(*f.where())
             .group_by(literal_column("bucket"), _U.purpose)
             .order_by(literal_column("bucket"), _U.purpose))
    with reading(engine) as conn:
        return _usage_rows(conn.execute(query).all(), 2)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The ledger against the sessions' running totals, over the same sessions."""

    sessions: int
    ledger_tokens: int
    session_tokens: int
    mismatched: list[tuple[str, int, int]] = field(default_factory=list)
    """``(session id, total_tokens, ledger sum)`` of sessions where the two differ."""

    @property
    def reconciles(self) -> bool:
        """Whether every session's ``total_tokens`` equals its ledger sum."""
        return not self.mismatched and self.ledger_tokens == self.session_tokens


def reconcile(engine: Engine, tenant: Ref | None, session_id: str | None = None) -> \
        Reconciliation:
    """Each session's ``total_tokens`` against the sum of its ledger rows (all time), for
    ``tenant``'s sessions (or the one session)."""
    ledger = (select(func.coalesce(func.sum(_U.prompt_tokens + _U.completion_tokens), 0))
              .where(_U.session_id == _S.id).scalar_subquery())
    where: list[ColumnElement[bool]] = []
    if tenant is not None:
        where.append(ref_filter(chat_sessions, "tenant", tenant))
    if session_id is not None:
        where.append(_S.id == session_id)
    totals = select(func.count(), func.coalesce(func.sum(_S.total_tokens), 0)).where(*where)
    usage_where: list[ColumnElement[bool]] = []
    if tenant is not None:
        usage_where.append(ref_filter(chat_usage, "tenant", tenant))
    if session_id is not None:
        usage_where.append(_U.session_id == session_id)
    billed = select(func.coalesce(func.sum(_U.prompt_tokens + _U.completion_tokens), 0)
                    ).where(*usage_where)
    differ = (select(_S.id, _S.total_tokens, ledger).where(*where, _S.total_tokens != ledger)
              .order_by(_S.id).limit(20))
    with reading(engine) as conn:
        count, session_tokens = conn.execute(totals).one()
        ledger_tokens = int(conn.execute(billed).scalar_one())
        mismatched = [(r[0], int(r[1]), int(r[2])) for r in conn.execute(differ)]
    return Reconciliation(int(count), ledger_tokens, int(session_tokens), mismatched)


def usage_choices(engine: Engine, tenant: Ref | None) -> tuple[list[str], list[str]]:
    """The purposes and models the ledger holds (for the filter's choices)."""
    where = [ref_filter(chat_usage, "tenant", tenant)] if tenant is not None else []
    with reading(engine) as conn:
        purposes = [r[0] for r in conn.execute(
            select(_U.purpose).where(*where).distinct().order_by(_U.purpose))]
        models = [r[0] for r in conn.execute(
            select(_U.model).where(*where, _U.model.is_not(None)).distinct()
            .order_by(_U.model).limit(200))]
    return purposes, models


@dataclass(frozen=True, slots=True)
class LedgerLine:
    """One row of the ledger."""

    id: int
    session_id: str
    tenant: Ref
    purpose: str
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    created_at: datetime


def ledger_lines(engine: Engine, f: UsageFilter, *, limit: int) -> list[LedgerLine]:
    """The newest ledger rows matching ``f``."""
    query = (select(_U.id, _U.session_id, _U.tenant_type, _U.tenant_id, _U.tenant_id_int,
                    _U.purpose, _U.model, _U.prompt_tokens, _U.completion_tokens,
                    _U.created_at)
             .where(*f.where()).order_by(_U.created_at.desc(), _U.id.desc()).limit(limit))
    with reading(engine) as conn:
        out = []
        for r in conn.execute(query):
            tenant = Ref.from_columns(r[2], r[3], r[4])
            assert tenant is not None
            out.append(LedgerLine(int(r[0]), r[1], tenant, r[5], r[6], int(r[7]), int(r[8]),
                                  as_utc(r[9]) or r[9]))
        return out

