"""What a restore may create: only what the dump itself owns, whole and consistent.

An import creates; it never merges. Every message, tool call, usage line and fold must
belong to a session row of the same dump (a usage line of a deleted session, to one of
the dump's tenants); a usage line bills its session's tenant; a memory's or a hold's
session, when the dump holds it, is of the same tenant, else the database must not hold
it either; an erased item belongs to an erasure of the dump; a tenant's dump holds that
tenant's rows alone. Each session is consistent as the store keeps it
(its ``total_tokens`` is the sum of its usage lines, its seqs rise and end at or below
``last_seq``), and a session whose placeholder vault is stored was redacted, so it stays
``pii_protected``: a dump cannot import a protected conversation with its protection off.

:class:`Ownership` reads the rows one by one and keeps a few numbers per session (never
the rows): a restore runs it over the whole dump before it writes anything. What only the
target database can answer (is a session id or a tenant already there?) it hands over as
:meth:`Ownership.claims`; the restore asks the database. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chatkeep.errors import InvalidDump
from chatkeep.refs import Ref
from chatkeep.store.dump_format import NUMBERED, row_ref

_REPLAY = ("chat_summary_versions", "chat_replay_manifests", "chat_replay_texts")
"""A session's replay records: of its tenant, at seqs it has."""
_SESSION_CHILDREN = frozenset({"chat_checkpoints", "chat_messages", "chat_tool_calls", "chat_usage",
                               "chat_folds", *_REPLAY})


@dataclass(slots=True)
class _Session:
    tenant: Ref
    last_seq: int
    total_tokens: int
    usage: int = 0
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Claims:
    """What the target database must not hold for a restore to go ahead: these session
    ids, any row of these tenants, and these sessions that memories name as their source
    though the dump does not carry them."""

    sessions: frozenset[str]
    tenants: frozenset[Ref]
    sources: frozenset[str]


@dataclass(slots=True)
class Ownership:
    """Checks each row of a dump against the rows before it (see the module doc)."""

    tenant: Ref | None
    _sessions: dict[str, _Session] = field(default_factory=dict)
    _tenants: set[Ref] = field(default_factory=set)
    _sources: set[str] = field(default_factory=set)
    _numbers: dict[str, int] = field(default_factory=dict)
    _successor: int = 0
    _erasures: dict[str, Ref] = field(default_factory=dict)
    _fresh: tuple[list[str], list[Ref], list[str]] = field(
        default_factory=lambda: ([], [], []))

    def admit(self, table: str, row: dict[str, Any]) -> None:
        """Refuse ``row`` (decoded, of ``table``) unless the dump owns it."""
        if table in NUMBERED:
            self._number(table, row)
        if table == "chat_sessions":
            self._session(row)
        elif table == "memories":
            self._memory(row)
        elif table in _SESSION_CHILDREN:
            self._child(table, row)
        else:
            self._lifecycle(table, row)

    def finish(self) -> Claims:
        """The end-of-dump checks; then what the database must not hold."""
        for session_id, session in self._sessions.items():
            if session.total_tokens != session.usage:
                raise InvalidDump(f"session {session_id}: total_tokens "
                                  f"{session.total_tokens} is not the sum of its usage "
                                  f"lines ({session.usage})")
        held = self._numbers.get("memories", 0)
        if self._successor > held:
            raise InvalidDump(f"memories: superseded_by names memory {self._successor} of "
                              f"a dump holding {held}")
        return self.claims()

    def claims(self) -> Claims:
        """What the rows so far need the database not to hold."""
        return Claims(frozenset(self._sessions), frozenset(self._tenants),
                      frozenset(self._sources))

    def fresh(self) -> Claims:
        """What the rows admitted since the last call claim (the sessions, tenants and
        sources seen for the first time): a restore checks them batch by batch."""
        sessions, tenants, sources = self._fresh
        self._fresh = ([], [], [])
        return Claims(frozenset(sessions), frozenset(tenants), frozenset(sources))

    def _own_tenant(self, tenant: Ref, where: str) -> None:
        if self.tenant is not None and tenant != self.tenant:
            raise InvalidDump(f"{where} is of tenant {tenant}, in a dump of tenant "
                              f"{self.tenant}")
        if tenant not in self._tenants:
            self._tenants.add(tenant)
            self._fresh[1].append(tenant)

    def _session(self, row: dict[str, Any]) -> None:
        session_id = row["id"]
        tenant = row_ref(row, "tenant", "chat_sessions.tenant")
        assert tenant is not None  # the column is not null
        self._own_tenant(tenant, f"session {session_id}")
        if session_id in self._sessions:
            raise InvalidDump(f"session {session_id} appears twice")
        last = row["last_seq"]
        for name in ("summary_watermark", "distilled_through"):
            if row[name] > last:
                raise InvalidDump(f"session {session_id}: {name} {row[name]} is past its "
                                  f"last seq {last}")
        if (row["pii_vault"] is not None or row["pii_vault_version"] > 0) and \
                not row["pii_protected"]:
            raise InvalidDump(f"session {session_id} holds a placeholder vault, so it was "
                              "redacted, but pii_protected is off: a dump cannot lift a "
                              "session's protection")
        self._sessions[session_id] = _Session(tenant, last, row["total_tokens"])
        self._fresh[0].append(session_id)

    def _parent(self, table: str, row: dict[str, Any]) -> _Session:
        session = self._sessions.get(row["session_id"])
        if session is None:
            raise InvalidDump(f"{table}: a row of session {row['session_id']}, which the "
                              "dump does not create (an import never adds to a session "
                              "it did not bring)")
        return session

    def _number(self, table: str, row: dict[str, Any]) -> None:
        number = self._numbers.get(table, 0) + 1
        if row["id"] != number:
            raise InvalidDump(f"{table}: the dump numbers its rows 1, 2, ...; row "
                              f"{row['id']} came where {number} belongs")
        self._numbers[table] = number

    def _child(self, table: str, row: dict[str, Any]) -> None:
        if table == "chat_usage" and row["session_id"] is None:
            # A deleted session's line: the ledger keeps its numbers, billed to its tenant.
            tenant = row_ref(row, "tenant", "chat_usage.tenant")
            assert tenant is not None
            self._own_tenant(tenant, "a usage line")
            return
        session = self._parent(table, row)
        where = f"{table} of session {row['session_id']}"
        if table == "chat_messages":
            if not session.seq < row["seq"] <= session.last_seq:
                raise InvalidDump(f"{where}: seq {row['seq']} does not follow seq "
                                  f"{session.seq} within the session's last seq "
                                  f"{session.last_seq}")
            session.seq = row["seq"]
        elif table == "chat_tool_calls":
            result = row["result_seq"]
            if not 1 <= row["call_seq"] <= session.last_seq or (
                    result is not None and not row["call_seq"] < result <= session.last_seq):
                raise InvalidDump(f"{where}: call {row['call_id']!r} at seqs the session "
                                  "does not have")
        elif table == "chat_usage":
            if row_ref(row, "tenant", f"{table}.tenant") != session.tenant:
                raise InvalidDump(f"{where}: a usage line billed to another tenant than "
                                  "its session's")
            session.usage += row["prompt_tokens"] + row["completion_tokens"]
        elif table == "chat_checkpoints" and \
                row_ref(row, "tenant", f"{table}.tenant") != session.tenant:
            raise InvalidDump(f"{where}: a checkpoint of another tenant than its session's")
        elif table == "chat_folds" and \
                not 1 <= row["from_seq"] <= row["through_seq"] <= session.last_seq:
            raise InvalidDump(f"{where}: a fold of seqs the session does not have")
        elif table in _REPLAY:
            _replay_row(table, row, session, where)

    def _lifecycle(self, table: str, row: dict[str, Any]) -> None:
        """Holds, retention policies, erasures and their log, quotas and the reservations
        in flight on them (counted when their lease ends, as in the source): the tenant's
        own records."""
        tenant = row_ref(row, "tenant", f"{table}.tenant")
        assert tenant is not None
        self._own_tenant(tenant, f"a row of {table}")
        if table == "chat_erasures":
            if row["id"] in self._erasures:
                raise InvalidDump(f"erasure {row['id']} appears twice")
            self._erasures[row["id"]] = tenant
        elif table == "chat_erased_items" and self._erasures.get(row["erasure_id"]) != tenant:
            raise InvalidDump(f"chat_erased_items: an item of erasure {row['erasure_id']}, "
                              "which the dump does not create for this tenant")
        elif table in ("chat_holds", "chat_reservations") and row["session_id"] is not None:
            self._source(row["session_id"], tenant, f"{table} row {row['id']}")
        elif table == "chat_lifecycle_log" and row["hold_id"] is not None and \
                not 1 <= row["hold_id"] <= self._numbers.get("chat_holds", 0):
            raise InvalidDump(f"chat_lifecycle_log: names hold {row['hold_id']}, which the "
                              "dump does not create before it")

    def _source(self, session_id: str, tenant: Ref, where: str) -> None:
        """A session a row names without a foreign key: the dump's own, of the same
        tenant, or one the database must not hold either."""
        session = self._sessions.get(session_id)
        if session is None:
            if session_id not in self._sources:
                self._sources.add(session_id)
                self._fresh[2].append(session_id)
        elif session.tenant != tenant:
            raise InvalidDump(f"{where} of tenant {tenant} names session {session_id} of "
                              f"tenant {session.tenant}")

    def _memory(self, row: dict[str, Any]) -> None:
        tenant = row_ref(row, "tenant", "memories.tenant")
        assert tenant is not None
        self._own_tenant(tenant, f"memory {row['id']}")
        successor = row["superseded_by"]
        if successor is not None:
            if successor < 1:
                raise InvalidDump(f"memory {row['id']}: superseded_by must be at least 1")
            self._successor = max(self._successor, successor)
        if row["source_session_id"] is not None:
            self._source(row["source_session_id"], tenant, f"memory {row['id']}")


def _replay_row(table: str, row: dict[str, Any], session: _Session, where: str) -> None:
    """A summary version, a manifest or a text of a session: its tenant's; a summary
    version's watermark at a seq the session has (a manifest may name seqs a framework's
    pop deleted since: its replay marks them erased)."""
    if row_ref(row, "tenant", f"{table}.tenant") != session.tenant:
        raise InvalidDump(f"{where}: of another tenant than its session's")
    seq = row.get("watermark", 0)
    if not 0 <= seq <= session.last_seq:
        raise InvalidDump(f"{where}: at seq {seq}, which the session does not have")
