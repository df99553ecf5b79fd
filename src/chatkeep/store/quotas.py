"""Quotas' SQL (issue 33): the quota rows, and the reservation each call holds on them.

Every statement is built once and run through the store's transports (SQLAlchemy Core,
or the driver itself, :mod:`chatkeep.store.executor`), the same objects on SQLite and
PostgreSQL, so PgBouncer in transaction mode sees nothing that outlives its transaction.
A reservation is one transaction: a conditional ``UPDATE ... RETURNING`` of the quota rows
that apply (the tenant's and its actor's), which on PostgreSQL locks those rows until the
commit and on SQLite runs under ``BEGIN IMMEDIATE`` (one writer at a time); if a returned
row is over its quota the transaction is rolled back and nothing was written, otherwise
the reservation's own row (with its lease) is inserted in the same transaction. Settling
deletes that row and moves its tokens from ``reserved`` to ``spent`` (the real usage),
again in one transaction. A window rolls over inside the same statements: the arithmetic
is on epoch seconds, so it is the same on both databases.

A reservation held for a turn is settled inside the transaction that stores its answer
(a :class:`Settlement` handed to the append): on PostgreSQL the settle's CTEs ride in the
append's one statement (:data:`PG_APPEND_SETTLE`), on SQLite its two statements join the
append's ``BEGIN IMMEDIATE`` (:func:`settle_in`), so the answer costs no commit more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    Engine,
    Select,
    alias,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)

from chatkeep.errors import QuotaExceeded
from chatkeep.refs import Ref
from chatkeep.store.direct import driver_transport
from chatkeep.store.executor import CoreTransport, Executor, Transport
from chatkeep.store.lazy import LazyStatements, dialect_insert
from chatkeep.store.rows import as_utc, time_ordered_id, utcnow
from chatkeep.store.schema import TS, chat_quotas, chat_reservations
from chatkeep.store.statements import PG_APPEND

TENANT_KEY = ""
"""The scope key of a tenant-wide quota."""
NO_KEY = "-"
"""A key no quota row has (a reservation that holds on one row only)."""

_Q = chat_quotas.c
_R = chat_reservations.c
_NOW = bindparam("b_now", type_=BigInteger())
_ROLLED = _Q.window_end <= _NOW
_NEW_END = case((_Q.window_kind == "day", bindparam("b_day_end", type_=BigInteger())),
                (_Q.window_kind == "month", bindparam("b_month_end", type_=BigInteger())),
                else_=_NOW + _Q.window_seconds)
_ROLL_END = case((_ROLLED, _NEW_END), else_=_Q.window_end)
_ROLL_SPENT = case((_ROLLED, 0), else_=_Q.spent)
_TENANT = and_(_Q.tenant_type == bindparam("b_tenant_type"),
               _Q.tenant_id == bindparam("b_tenant_id"))
_KEYS = and_(_TENANT, _Q.scope_key.in_([bindparam("b_key_a"), bindparam("b_key_b")]))
_RETURNED = (_Q.scope_key, _Q.tokens, _Q.spent, _Q.reserved, _Q.window_end)

RESERVE = (update(chat_quotas).where(_KEYS)
           .values(window_end=_ROLL_END, spent=_ROLL_SPENT,
                   reserved=_Q.reserved + bindparam("b_tokens", type_=BigInteger()))
           .returning(*_RETURNED))
"""Add a call's tokens to ``reserved`` on the quota rows that apply (rolling a window
over that ended); the caller checks the returned rows and rolls back if one is over."""
_HELD = bindparam("b_held", type_=BigInteger())
SETTLE = (update(chat_quotas).where(_KEYS)
          .values(window_end=_ROLL_END,
                  spent=_ROLL_SPENT + bindparam("b_used", type_=BigInteger()),
                  reserved=case((_Q.reserved > _HELD, _Q.reserved - _HELD), else_=0))
          .returning(*_RETURNED))
"""Move a reservation's tokens out of ``reserved``, its real usage into ``spent``."""
TAKE_RESERVATION = (delete(chat_reservations).where(_R.id == bindparam("b_id"))
                    .returning(_R.tenant_type, _R.tenant_id, _R.key_a, _R.key_b, _R.tokens))
TAKE_EXPIRED = (delete(chat_reservations)
                .where(_R.id == bindparam("b_id"), _R.lease_until <= _NOW)
                .returning(_R.tenant_type, _R.tenant_id, _R.key_a, _R.key_b, _R.tokens))
INSERT_RESERVATION = insert(chat_reservations)
EXPIRED = (select(_R.id).where(_R.lease_until <= _NOW).order_by(_R.lease_until, _R.id)
           .limit(bindparam("b_limit")))
QUOTAS_OF = select(chat_quotas).where(_KEYS)
ALL_QUOTAS = select(chat_quotas).order_by(_Q.tenant_type, _Q.tenant_id, _Q.scope_key)
TENANT_QUOTAS = select(chat_quotas).where(_TENANT).order_by(_Q.scope_key)
SET_QUOTA = (update(chat_quotas).where(_KEYS)
             .values(tokens=bindparam("b_quota", type_=BigInteger()),
                     window_kind=bindparam("b_kind"), window_seconds=bindparam("b_seconds"),
                     window_end=case((_Q.window_kind == bindparam("b_kind"), _Q.window_end),
                                     else_=bindparam("b_end", type_=BigInteger())),
                     updated_at=bindparam("b_at"))
             .returning(*_RETURNED))
INSERT_QUOTA = insert(chat_quotas)
INSERT_DEFAULT = LazyStatements(
    ("sqlite", "postgresql"),
    lambda dialect: dialect_insert(dialect, chat_quotas).on_conflict_do_nothing())
"""The config's default quota for a tenant that has none (a concurrent insert wins); per
dialect, built on first use (PostgreSQL's construct imports its dialect)."""
CLEAR_QUOTA = delete(chat_quotas).where(_KEYS).returning(_Q.scope_key)
RESERVATIONS_OF = (select(_R.id, _R.tokens, _R.purpose, _R.session_id, _R.lease_until,
                          _R.key_a, _R.key_b)
                   .where(_R.tenant_type == bindparam("b_tenant_type"),
                          _R.tenant_id == bindparam("b_tenant_id"))
                   .order_by(_R.lease_until))


# -- PostgreSQL: each a single statement, its own transaction (one round trip) ------------
# The quota rows are locked (FOR UPDATE: a waiter re-reads the row a concurrent reserver
# committed), the verdict is taken over all of them, and the update and the reservation's
# insert happen only when every row fits: all or nothing, in one statement.

_PG_ROLL_END = ("CASE WHEN CAST(:b_now AS BIGINT) >= window_end THEN CASE window_kind "
                "WHEN 'day' THEN CAST(:b_day_end AS BIGINT) "
                "WHEN 'month' THEN CAST(:b_month_end AS BIGINT) "
                "ELSE CAST(:b_now AS BIGINT) + window_seconds END ELSE window_end END")
_PG_ROLL_SPENT = "CASE WHEN CAST(:b_now AS BIGINT) >= window_end THEN 0 ELSE spent END"
_PG_KEYS = ("tenant_type = :b_tenant_type AND tenant_id = :b_tenant_id "
            "AND scope_key IN (:b_key_a, :b_key_b)")
_BIG = ("b_now", "b_day_end", "b_month_end", "b_tokens", "b_lease")
PG_RESERVE_CTES = f"""locked AS (
  SELECT scope_key, tokens, {_PG_ROLL_SPENT} AS spent, reserved, window_end
  FROM chat_quotas WHERE {_PG_KEYS} ORDER BY scope_key FOR UPDATE),
verdict AS (
  SELECT bool_and(spent + reserved + CAST(:b_tokens AS BIGINT) <= tokens) AS fits,
         max(scope_key) FILTER (WHERE scope_key = :b_key_a) AS key_a,
         max(scope_key) FILTER (WHERE scope_key = :b_key_b) AS key_b
  FROM locked),
upd AS (
  UPDATE chat_quotas SET window_end = {_PG_ROLL_END}, spent = {_PG_ROLL_SPENT},
         reserved = reserved + CAST(:b_tokens AS BIGINT)
  FROM verdict WHERE verdict.fits AND {_PG_KEYS}
  RETURNING chat_quotas.scope_key),
ins AS (
  INSERT INTO chat_reservations (id, tenant_type, tenant_id, tenant_id_int, key_a, key_b,
                                 tokens, session_id, purpose, lease_until, created_at)
  SELECT :b_id, :b_tenant_type, :b_tenant_id, :b_tenant_int,
         verdict.key_a, verdict.key_b,
         CAST(:b_tokens AS BIGINT), :b_session_id, :b_purpose, CAST(:b_lease AS BIGINT),
         :b_at
  FROM verdict WHERE verdict.fits
  RETURNING id)"""
"""The reservation's common table expressions on PostgreSQL: the quota rows locked
(``locked``), whether all of them fit (``verdict``; NULL when none applies), and, when
they do, their update and the reservation's row. A statement that writes more beside it
(the request's manifest) names them after ``WITH`` and selects :data:`PG_RESERVED`."""
PG_RESERVED = ("scope_key, tokens, spent, reserved + CAST(:b_tokens AS BIGINT), window_end, "
               "(SELECT fits FROM verdict)")
"""What a reserving statement returns of each row in ``locked`` (``reserved`` as if this
call's were added), for :meth:`QuotaStore.verdict`."""
PG_RESERVE_BINDS: tuple[BindParameter[Any], ...] = (
    *(bindparam(name, type_=BigInteger()) for name in _BIG), bindparam("b_at", type_=TS))
"""The typed parameters of :data:`PG_RESERVE_CTES`."""
PG_RESERVE = text(f"WITH {PG_RESERVE_CTES}\nSELECT {PG_RESERVED} FROM locked").bindparams(
    *PG_RESERVE_BINDS)
"""The reservation on PostgreSQL; returns the quota rows and whether all of them fit
(then it was written)."""


def _pg_settle(take: str) -> Any:
    return text(f"""
WITH r AS ({take} RETURNING tenant_type, tenant_id, key_a, key_b, tokens),
u AS (
  UPDATE chat_quotas SET window_end = {_PG_ROLL_END},
         spent = {_PG_ROLL_SPENT} + COALESCE(CAST(:b_used AS BIGINT), r.tokens),
         reserved = CASE WHEN chat_quotas.reserved > r.tokens
                         THEN chat_quotas.reserved - r.tokens ELSE 0 END
  FROM r WHERE chat_quotas.tenant_type = r.tenant_type
    AND chat_quotas.tenant_id = r.tenant_id AND chat_quotas.scope_key IN (r.key_a, r.key_b)
  RETURNING 1)
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM u)""").bindparams(
        *(bindparam(name, type_=BigInteger()) for name in ("b_now", "b_day_end",
                                                          "b_month_end", "b_used")))


PG_SETTLE = _pg_settle("DELETE FROM chat_reservations WHERE id = :b_id")
PG_EXPIRE = _pg_settle("DELETE FROM chat_reservations WHERE id = :b_id "
                       "AND lease_until <= CAST(:b_now AS BIGINT)")


def _with_settle(append: Select[Any]) -> Select[Any]:
    """PostgreSQL's one-statement append with a reservation's settle beside it (the
    reservation's row taken, its tokens moved from ``reserved`` to ``spent`` at
    ``b_q_used``, else at its reserved amount): both in the append's one transaction.
    Its own parameter names (``b_q_*``), as the append's ``b_now`` is a timestamp.

    Written short (tables under one-letter aliases, constants inline): psycopg converts
    a statement's placeholders once and caches the result only for statements of at
    most 4,096 bytes (``MAX_CACHED_STATEMENT_LENGTH``); over it, every call parses the
    whole text again (tests/store/test_pg_statement_size.py)."""
    now = bindparam("b_q_now", type_=BigInteger())
    # An alias is typed as a NamedFromClause, which delete() and update() do not name;
    # at run time it is the Alias they take.
    r: Any = alias(chat_reservations, "r")
    q: Any = alias(chat_quotas, "q")
    taken = (delete(r).where(r.c.id == bindparam("b_q_id"))
             .returning(r.c.tenant_type, r.c.tenant_id, r.c.key_a, r.c.key_b, r.c.tokens)
             .cte("st"))
    rolled = q.c.window_end <= now
    end = case((q.c.window_kind == literal_column("'day'"),
                bindparam("b_q_day_end", type_=BigInteger())),
               (q.c.window_kind == literal_column("'month'"),
                bindparam("b_q_month_end", type_=BigInteger())),
               else_=now + q.c.window_seconds)
    used = func.coalesce(bindparam("b_q_used", type_=BigInteger()), taken.c.tokens)
    zero: ColumnElement[int] = literal_column("0", BigInteger())
    settled = (update(q)
               .where(q.c.tenant_type == taken.c.tenant_type,
                      q.c.tenant_id == taken.c.tenant_id,
                      or_(q.c.scope_key == taken.c.key_a, q.c.scope_key == taken.c.key_b))
               .values(window_end=case((rolled, end), else_=q.c.window_end),
                       spent=case((rolled, zero), else_=q.c.spent) + used,
                       reserved=case((q.c.reserved > taken.c.tokens,
                                      q.c.reserved - taken.c.tokens), else_=zero))
               .returning(literal_column("1")).cte("sq"))
    return append.add_cte(taken).add_cte(settled)


PG_APPEND_SETTLE = LazyStatements((False, True), lambda usage: _with_settle(PG_APPEND[usage]))
""":data:`~chatkeep.store.statements.PG_APPEND` with a reservation's settle (CTEs), without
and with usage rows; built on first use (only PostgreSQL runs it)."""


@dataclass(frozen=True, slots=True)
class QuotaRow:
    """A stored quota as read: its limit and window, what the current window spent
    (ending at ``window_end``, epoch seconds) and what is reserved."""

    tenant: Ref
    actor: Ref | None
    tokens: int
    window_kind: str
    window_seconds: int
    window_end: int
    spent: int
    reserved: int
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class Held:
    """A reservation written: its id, its tokens, and its lease's end (epoch seconds)."""

    id: str
    tokens: int
    lease_until: int


@dataclass(frozen=True, slots=True)
class Clock:
    """The instants a statement's window arithmetic needs, in epoch seconds."""

    now: int
    day_end: int
    month_end: int

    def params(self) -> dict[str, int]:
        """As bind parameters."""
        return {"b_now": self.now, "b_day_end": self.day_end, "b_month_end": self.month_end}


@dataclass(slots=True)
class Boarding:
    """A reservation that another write carries: the request's manifest
    (:func:`chatkeep.store.replay.record_manifest`) writes it in its own transaction
    (:meth:`write`), or on PostgreSQL in its one statement (:meth:`before`, then
    :data:`PG_RESERVE_CTES` with :meth:`pg_params`, then :meth:`pg_verdict`), so holding
    a call's tokens costs no transaction and, on PostgreSQL, no round trip of its own.
    :attr:`held`: what was written (``None``: no quota applies)."""

    store: QuotaStore
    tenant: Ref
    actor: Ref | None
    tokens: int
    clock: Clock
    lease_until: int
    purpose: str
    session_id: str | None
    default: tuple[int, str, int, int] | None
    """The config's default quota ``(tokens, kind, seconds, window_end)``, if any."""
    held: Held | None = None

    def write(self, ex: Executor) -> None:
        """Write it with ``ex``, in the caller's transaction: ``QuotaExceeded`` when a
        quota cannot hold it (the caller's transaction then rolls back)."""
        self.held = self.store.reserve_in(
            ex, self.tenant, self.actor, self.tokens, self.clock,
            lease_until=self.lease_until, purpose=self.purpose,
            session_id=self.session_id, default=self.default)

    def before(self, ex: Executor) -> None:
        """What the carrying statement must find stored (it reads the quota rows as they
        stood when it began): the config's default quota for a tenant without one."""
        if self.default is not None:
            self.store.add_default(ex, self.tenant, self.default)

    def pg_params(self) -> tuple[Held, dict[str, Any]]:
        """The reservation to write, and its parameters in the carrying statement."""
        held = Held(time_ordered_id(), self.tokens, self.lease_until)
        return held, self.store.pg_params(self.tenant, self.actor, held, self.clock,
                                          purpose=self.purpose, session_id=self.session_id)

    def pg_verdict(self, rows: Sequence[Any], held: Held) -> None:
        """Take the carrying statement's :data:`PG_RESERVED` rows: ``held`` written, no
        quota, or ``QuotaExceeded`` (the statement then wrote nothing)."""
        self.held = self.store.verdict(rows, held, self.tenant, self.actor, self.clock)


@dataclass(frozen=True, slots=True)
class Settlement:
    """A reservation to settle inside another write's transaction (the append of the
    answer it was held for): ``used`` tokens (``None``: its reserved amount) at
    ``clock``."""

    reservation_id: str
    used: int | None
    clock: Clock

    def pg_params(self) -> dict[str, Any]:
        """The parameters of :data:`PG_APPEND_SETTLE`'s settle."""
        return {"b_q_id": self.reservation_id, "b_q_used": self.used,
                "b_q_now": self.clock.now, "b_q_day_end": self.clock.day_end,
                "b_q_month_end": self.clock.month_end}


def settle_in(ex: Executor, take: Any, reservation_id: str, used: int | None,
              clock: Clock) -> bool:
    """Settle a reservation with ``ex``'s transaction (taken by ``take``: any, or only
    one whose lease ended): its row deleted, its tokens moved from ``reserved`` to
    ``used`` in ``spent``. ``False`` when there was none (settled already, or swept)."""
    taken = ex.rows(take, {"b_id": reservation_id, **clock.params()})
    if not taken:
        return False
    tenant_type, tenant_id, key_a, key_b, held = taken[0]
    ex.rows(SETTLE, {"b_tenant_type": tenant_type, "b_tenant_id": tenant_id,
                     "b_key_a": NO_KEY if key_a is None else key_a,
                     "b_key_b": NO_KEY if key_b is None else key_b,
                     **clock.params(), "b_held": int(held),
                     "b_used": int(held) if used is None else used})
    return True


def actor_key(actor: Ref | None) -> str:
    """The scope key of ``actor``'s quota (``NO_KEY`` for none)."""
    return NO_KEY if actor is None else f"actor:{actor.type}:{actor.id_text}"


def _keys(tenant: Ref, actor: Ref | None) -> dict[str, Any]:
    return {"b_tenant_type": tenant.type, "b_tenant_id": tenant.id_text,
            "b_key_a": TENANT_KEY, "b_key_b": actor_key(actor)}


def _row(row: Any) -> QuotaRow:
    """A ``select(chat_quotas)`` row, read by position (as every transport returns it)."""
    (tenant_type, tenant_id, tenant_int, _key, actor_type, actor_id, actor_int, tokens,
     kind, seconds, end, spent, reserved, updated_at) = row
    tenant = Ref.from_columns(tenant_type, tenant_id, tenant_int)
    assert tenant is not None
    return QuotaRow(tenant, Ref.from_columns(actor_type, actor_id, actor_int), int(tokens),
                    str(kind), int(seconds), int(end), int(spent), int(reserved),
                    as_utc(updated_at))


class QuotaStore:
    """The quota procedures over one engine. Thread-safe; one per keep."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock
        self._transport: Transport = driver_transport(engine) or CoreTransport(engine)

    # -- quotas ---------------------------------------------------------------------------

    def set(self, tenant: Ref, actor: Ref | None, tokens: int, kind: str, seconds: int,
            window_end: int) -> None:
        """Store the quota (replacing its limit and window; what the window spent and
        what is reserved stay; a changed window kind starts at ``window_end``)."""
        params = {**_keys(tenant, actor), "b_key_a": actor_key(actor) if actor else
                  TENANT_KEY, "b_key_b": NO_KEY, "b_quota": tokens, "b_kind": kind,
                  "b_seconds": seconds, "b_end": window_end, "b_at": self.clock()}
        with self._transport.transaction() as ex:
            if ex.rows(SET_QUOTA, params):
                return
            ex.many(INSERT_QUOTA, [self._new_row(tenant, actor, tokens, kind, seconds,
                                                 window_end)])

    def _new_row(self, tenant: Ref, actor: Ref | None, tokens: int, kind: str, seconds: int,
                 window_end: int) -> dict[str, Any]:
        return {"tenant_type": tenant.type, "tenant_id": tenant.id_text,
                "tenant_id_int": tenant.id_is_int,
                "scope_key": TENANT_KEY if actor is None else actor_key(actor),
                "actor_type": actor.type if actor else None,
                "actor_id": actor.id_text if actor else None,
                "actor_id_int": actor.id_is_int if actor else None,
                "tokens": tokens, "window_kind": kind, "window_seconds": seconds,
                "window_end": window_end, "spent": 0, "reserved": 0,
                "updated_at": self.clock()}

    def get(self, tenant: Ref, actor: Ref | None) -> QuotaRow | None:
        """The stored quota of ``tenant`` (``actor=None``) or of its ``actor``."""
        params = {**_keys(tenant, None), "b_key_a": actor_key(actor) if actor else
                  TENANT_KEY}
        with self._transport.autocommit() as ex:  # one statement
            rows = ex.rows(QUOTAS_OF, params)
        return _row(rows[0]) if rows else None

    def quotas(self, tenant: Ref | None) -> list[QuotaRow]:
        """Every stored quota (or ``tenant``'s: its own and its actors'), in key order."""
        with self._transport.autocommit() as ex:  # one statement
            if tenant is None:
                rows = ex.rows(ALL_QUOTAS, {})
            else:
                rows = ex.rows(TENANT_QUOTAS, {"b_tenant_type": tenant.type,
                                               "b_tenant_id": tenant.id_text})
        return [_row(r) for r in rows]

    def clear(self, tenant: Ref, actor: Ref | None) -> bool:
        """Remove the quota; reservations held on it are then settled against nothing."""
        params = {**_keys(tenant, None), "b_key_a": actor_key(actor) if actor else
                  TENANT_KEY}
        with self._transport.transaction() as ex:
            return bool(ex.rows(CLEAR_QUOTA, params))

    def reservations(self, tenant: Ref) -> list[tuple[str, int, str, str | None, int]]:
        """``tenant``'s held reservations: ``(id, tokens, purpose, session_id,
        lease_until)``, the lease ending first."""
        with self._transport.autocommit() as ex:  # one statement
            rows = ex.rows(RESERVATIONS_OF, {"b_tenant_type": tenant.type,
                                             "b_tenant_id": tenant.id_text})
        return [(str(r[0]), int(r[1]), str(r[2]), r[3], int(r[4])) for r in rows]

    # -- reservations ---------------------------------------------------------------------

    def reserve(self, boarding: Boarding) -> None:
        """Write ``boarding`` on every quota that applies, all or none, in a transaction
        of its own (:meth:`Boarding.write`); on PostgreSQL one statement in autocommit
        (one round trip)."""
        opened = self._transport.autocommit() if self._transport.dialect == "postgresql" \
            else self._transport.transaction()
        with opened as ex:
            boarding.write(ex)

    def reserve_in(self, ex: Executor, tenant: Ref, actor: Ref | None, tokens: int,
                   clock: Clock, *, lease_until: int, purpose: str, session_id: str | None,
                   default: tuple[int, str, int, int] | None = None) -> Held | None:
        """Reserve ``tokens`` with ``ex`` (in the caller's transaction, or in autocommit
        on PostgreSQL): ``None`` when no quota applies (nothing written);
        ``QuotaExceeded`` when one cannot hold them (raised before anything of the
        reservation is written; the caller's transaction rolls back). ``default``: the
        config's ``(tokens, kind, seconds, window_end)`` for a tenant without a quota."""
        dialect = self._transport.dialect
        if default is not None:
            self.add_default(ex, tenant, default)
        held = Held(time_ordered_id(), tokens, lease_until)
        if dialect == "postgresql":
            rows = ex.rows(PG_RESERVE, self.pg_params(tenant, actor, held, clock,
                                                      purpose=purpose, session_id=session_id))
            return self.verdict(rows, held, tenant, actor, clock)
        rows = ex.rows(RESERVE, {**_keys(tenant, actor), **clock.params(), "b_tokens": tokens})
        if not rows:
            return None
        if any(int(r[2]) + int(r[3]) > int(r[1]) for r in rows):
            raise _exceeded(tenant, actor, tokens, rows, clock.now)
        keys = {str(r[0]) for r in rows}
        ex.many(INSERT_RESERVATION, [{
            "id": held.id, "tenant_type": tenant.type, "tenant_id": tenant.id_text,
            "tenant_id_int": tenant.id_is_int,
            "key_a": TENANT_KEY if TENANT_KEY in keys else None,
            "key_b": next((k for k in keys if k != TENANT_KEY), None),
            "tokens": tokens, "session_id": session_id, "purpose": purpose,
            "lease_until": lease_until, "created_at": self.clock()}])
        return held

    def add_default(self, ex: Executor, tenant: Ref,
                    default: tuple[int, str, int, int]) -> None:
        """Store the config's ``default`` quota ``(tokens, kind, seconds, window_end)`` for
        ``tenant`` unless it has one (a concurrent insert wins)."""
        ex.many(INSERT_DEFAULT[self._transport.dialect],
                [self._new_row(tenant, None, *default)])

    def pg_params(self, tenant: Ref, actor: Ref | None, held: Held, clock: Clock, *,
                  purpose: str, session_id: str | None) -> dict[str, Any]:
        """The parameters of :data:`PG_RESERVE_CTES` for writing ``held``."""
        return {**_keys(tenant, actor), **clock.params(), "b_tokens": held.tokens,
                "b_id": held.id, "b_tenant_int": tenant.id_is_int,
                "b_session_id": session_id, "b_purpose": purpose,
                "b_lease": held.lease_until, "b_at": self.clock()}

    @staticmethod
    def verdict(rows: Sequence[Any], held: Held, tenant: Ref, actor: Ref | None,
                clock: Clock) -> Held | None:
        """What a PostgreSQL reservation's rows (:data:`PG_RESERVED`, one per quota row
        that applies) say: ``held`` was written, ``None`` when no quota applies, or
        ``QuotaExceeded`` (nothing written)."""
        rows = [r for r in rows if r[0] is not None]  # a left join's row when none applies
        if rows and not rows[0][5]:
            raise _exceeded(tenant, actor, held.tokens, rows, clock.now)
        return held if rows else None

    def settle(self, reservation_id: str, used: int | None, clock: Clock) -> bool:
        """Settle the reservation: ``used`` tokens spent (``None``: its reserved amount;
        0: released). ``False`` when it was settled already, or swept."""
        return self._settle(TAKE_RESERVATION, reservation_id, used, clock)

    def _settle(self, take: Any, reservation_id: str, used: int | None, clock: Clock) -> bool:
        if self._transport.dialect == "postgresql":
            statement = PG_EXPIRE if take is TAKE_EXPIRED else PG_SETTLE
            with self._transport.autocommit() as ex:
                taken = ex.rows(statement, {"b_id": reservation_id, **clock.params(),
                                            "b_used": used})
            return bool(taken and taken[0][0])
        with self._transport.transaction() as ex:
            return settle_in(ex, take, reservation_id, used, clock)

    def expired(self, clock: Clock, limit: int) -> list[str]:
        """Up to ``limit`` ids of reservations whose lease ended."""
        with self._transport.autocommit() as ex:  # one statement
            return [str(r[0]) for r in ex.rows(EXPIRED, {"b_now": clock.now,
                                                         "b_limit": limit})]

    def expire(self, reservation_id: str, clock: Clock, *, count: bool) -> bool:
        """End one reservation whose lease ended (re-checked under the write): counted at
        its reserved amount (``count``) or released. ``False`` if settled meanwhile."""
        return self._settle(TAKE_EXPIRED, reservation_id, None if count else 0, clock)


def _exceeded(tenant: Ref, actor: Ref | None, tokens: int, rows: Sequence[Any],
              now: int) -> QuotaExceeded:
    """The refusal: the tightest quota's remaining tokens (before this reservation) and
    when its window frees them."""
    def left(r: Any) -> int:
        return max(0, int(r[1]) - int(r[2]) - (int(r[3]) - tokens))

    tight = min(rows, key=left)
    remaining = left(tight)
    whose = f"{tenant}" if str(tight[0]) == TENANT_KEY else f"{actor} of {tenant}"
    resets = datetime.fromtimestamp(int(tight[4]), UTC)
    return QuotaExceeded(
        f"quota exceeded for {whose}: {tokens} tokens asked, {remaining} of "
        f"{int(tight[1])} left in this window (frees at {resets.isoformat()}); nothing "
        "was sent", tenant=tenant, actor=actor if str(tight[0]) != TENANT_KEY else None,
        requested=tokens, remaining=remaining, resets_at=resets)
