"""Table definitions (SQLAlchemy Core), shared by SQLite and PostgreSQL.

Every table that a tenant-scoped query reads carries ``tenant_type``/``tenant_id``
or reaches them through ``chat_sessions`` by primary key; see DESIGN.md.

The indexes' PostgreSQL options (``WHERE``, ``USING gin``) are attached on first use
(:func:`chatkeep.store.lazy.postgresql_options`): made here, they would import the
PostgreSQL dialect in every process, a SQLite one too.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    event,
    false,
    text,
)

from chatkeep.refs import Ref
from chatkeep.store.lazy import postgresql_options
from chatkeep.store.memory_index import (
    PG_INDEX,
    PG_TEXT_CONFIG,
    create_memory_text_index,
    create_memory_vector_table,
    drop_memory_text_index,
    drop_memory_vector_table,
)

# Named constraints so Alembic migrations are stable across backends.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")
TS = DateTime(timezone=True)


def _ref_columns(prefix: str, nullable: bool) -> list[Column[object]]:
    return [
        Column(f"{prefix}_type", String(64), nullable=nullable),
        Column(f"{prefix}_id", String(255), nullable=nullable),
        Column(f"{prefix}_id_int", Boolean, nullable=nullable),
    ]


UNDISTILLED = "last_seq > distilled_through"
INDEXED_MARK = "langchain_id"
"""The message metadata key with an index of its own (the LangGraph middleware's ids)."""
MARK_EXPRESSIONS = {"sqlite": f"json_extract(metadata, '$.{INDEXED_MARK}')",
                    "postgresql": f"(metadata ->> '{INDEXED_MARK}')"}
"""``chat_messages.metadata[INDEXED_MARK]`` as text, per dialect, as the index holds it."""
MARK_INDEX = "ix_chat_messages_langchain_id"
"""Its index (one name, an expression per dialect; the PostgreSQL one declared
first: autogenerate compares it there, and skips expression indexes on SQLite)."""
MARK_PRESENT = {dialect: f"{expression} IS NOT NULL"
                for dialect, expression in MARK_EXPRESSIONS.items()}
"""The index's predicate per dialect (migration 0017): only messages that carry the id
have an entry, so an append of any other message writes nothing to it. A lookup states
``<expression> IN (...)`` (or ``=``), which implies it: both planners then use the index."""
SYSTEM_ROLE = "role = 'system'"

def ref_values(prefix: str, ref: Ref | None) -> dict[str, Any]:
    """Column values for a reference stored as ``<prefix>_type/_id/_id_int``."""
    if ref is None:
        return {f"{prefix}_type": None, f"{prefix}_id": None, f"{prefix}_id_int": None}
    return {f"{prefix}_type": ref.type, f"{prefix}_id": ref.id_text,
            f"{prefix}_id_int": ref.id_is_int}


def ref_filter(table: Table, prefix: str, ref: Ref) -> ColumnElement[bool]:
    """``WHERE`` clause matching a stored reference (ids compare by their text)."""
    return and_(table.c[f"{prefix}_type"] == ref.type, table.c[f"{prefix}_id"] == ref.id_text)


chat_sessions = Table(
    "chat_sessions",
    metadata,
    Column("id", String(36), primary_key=True),
    *_ref_columns("tenant", nullable=False),
    *_ref_columns("actor", nullable=True),
    *_ref_columns("subject", nullable=True),
    Column("title", String(255), nullable=True),
    Column("anonymize_pii", Boolean, nullable=False, default=True),
    Column("total_tokens", BigInteger, nullable=False, default=0),
    Column("last_seq", Integer, nullable=False, default=0),
    Column("summary", Text, nullable=True),
    Column("summary_watermark", Integer, nullable=False, default=0),
    Column("summary_version", Integer, nullable=False, default=0),
    Column("distilled_through", Integer, nullable=False, default=0),
    Column("distil_version", Integer, nullable=False, default=0),
    Column("distil_lease_until", TS, nullable=True),  # sweep claim; see memory/sweep.py
    Column("pii_vault", Text, nullable=True),
    Column("pii_vault_version", Integer, nullable=False, default=0),
    # Redacted by the application (created under its switch, or a vault stored): every
    # process redacts it then, whatever its own config (see PrivacyGuard.redacts).
    Column("pii_protected", Boolean, nullable=False, default=False, server_default=false()),
    Column("closed_at", TS, nullable=True),
    Column("last_message_at", TS, nullable=False),  # created_at until the first message
    Column("created_at", TS, nullable=False),
    Column("metadata", JSON, nullable=False, default=dict),
    # The application's own name for the conversation (the SDK's session_id, LangGraph's
    # thread_id), unique per tenant; NULL for sessions known only by their id.
    Column("key", String(255), nullable=True),
    # The next fold's claim (a lease) and the back-off after failed folds (issue 22).
    Column("fold_lease_until", TS, nullable=True),
    Column("fold_failures", Integer, nullable=False, default=0, server_default=text("0")),
    Column("fold_retry_at", TS, nullable=True),
    Index("uq_chat_sessions_tenant_key", "tenant_type", "tenant_id", "key", unique=True),
    Index("ix_chat_sessions_tenant_recent", "tenant_type", "tenant_id", "last_message_at"),
    # The sweep's index: only sessions with undistilled messages, oldest activity first,
    # so a sweep never walks the (ever growing) set of fully distilled sessions.
    postgresql_options(Index("ix_chat_sessions_undistilled", "last_message_at",
                             sqlite_where=text(UNDISTILLED)), where=text(UNDISTILLED)),
)

chat_folds = Table(
    "chat_folds",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("session_id", String(36), ForeignKey("chat_sessions.id", ondelete="CASCADE"),
           nullable=False),
    Column("version", Integer, nullable=False),  # summary_version the fold stored
    Column("from_seq", Integer, nullable=False),
    Column("through_seq", Integer, nullable=False),
    Column("calls", Integer, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("model", String(255), nullable=True),
    Column("created_at", TS, nullable=False),
    Index("ix_chat_folds_session", "session_id", "version"),
)
"""Each stored fold: the seqs it took, what its summarizer calls cost. Written in the
summary's compare-and-set, so a fold and its record exist together or not at all."""

chat_messages = Table(
    "chat_messages",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("session_id", String(36), ForeignKey("chat_sessions.id", ondelete="CASCADE"),
           nullable=False),
    Column("seq", Integer, nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=True),
    Column("tool_calls", JSON, nullable=True),
    Column("tool_call_id", String(255), nullable=True),
    Column("name", String(255), nullable=True),
    Column("tokens", Integer, nullable=True),
    Column("created_at", TS, nullable=False),
    Column("metadata", JSON, nullable=False, default=dict),
    # Provider payloads replayed verbatim (reasoning items, signed thinking blocks).
    Column("native", JSON, nullable=True),
    # Set = retracted (the Agents SDK's pop_item / clear_session): kept, never replayed.
    Column("retracted_at", TS, nullable=True),
    UniqueConstraint("session_id", "seq", name="uq_chat_messages_session_seq"),
    # Pinned instructions: build_history reads a session's system messages below the
    # summary watermark without walking its whole history.
    postgresql_options(Index("ix_chat_messages_system", "session_id", "seq",
                             sqlite_where=text(SYSTEM_ROLE)), where=text(SYSTEM_ROLE)),
    # The LangChain id a message was recorded under (migration 0016): the LangGraph
    # middleware asks which of a state's ids a session holds; the repository reads it with
    # this very expression (MARK_EXPRESSIONS), so the lookup is an index probe, not a scan
    # of the session's messages.
    # Partial (migration 0017): the messages without that id, most of them, skip it.
    postgresql_options(Index(MARK_INDEX, "session_id", text(MARK_EXPRESSIONS["postgresql"])),
                       where=text(MARK_PRESENT["postgresql"])).ddl_if(dialect="postgresql"),
    Index(MARK_INDEX, "session_id", text(MARK_EXPRESSIONS["sqlite"]),
          sqlite_where=text(MARK_PRESENT["sqlite"])).ddl_if(dialect="sqlite"),
)

# One row per assistant tool call: lets a tool result be checked against its call
# by primary key, and refuses a second answer to the same call.
chat_tool_calls = Table(
    "chat_tool_calls",
    metadata,
    Column("session_id", String(36), ForeignKey("chat_sessions.id", ondelete="CASCADE"),
           nullable=False),
    Column("call_id", String(255), nullable=False),
    Column("call_seq", Integer, nullable=False),
    Column("name", String(255), nullable=False),
    Column("result_seq", Integer, nullable=True),
    PrimaryKeyConstraint("session_id", "call_id", name="pk_chat_tool_calls"),
)

# The ledger outlives what it billed (issue 36): no foreign key, so deleting a session
# never unbills its tenant; the lifecycle sets ``session_id`` to NULL as it deletes the
# session, so a usage row keeps numbers only, never a way back to content.
chat_usage = Table(
    "chat_usage",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("session_id", String(36), nullable=True),
    *_ref_columns("tenant", nullable=False),
    Column("purpose", String(16), nullable=False),
    Column("model", String(255), nullable=True),
    Column("prompt_tokens", Integer, nullable=False, default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    Column("created_at", TS, nullable=False),
    Index("ix_chat_usage_tenant_time", "tenant_type", "tenant_id", "created_at"),
    Index("ix_chat_usage_session", "session_id"),
)

# Durable facts distilled from conversations. ``scope_key`` is "tenant",
# "subject:<ref>" or "personal:<ref>" (see chatkeep.memory.scopes): one indexed
# column that recall filters on and that makes a live duplicate impossible.
memories = Table(
    "memories",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    *_ref_columns("tenant", nullable=False),
    *_ref_columns("subject", nullable=True),
    *_ref_columns("actor", nullable=True),  # set = personal
    Column("scope", String(16), nullable=False),
    Column("scope_key", String(400), nullable=False),
    Column("content", Text, nullable=False),
    Column("content_key", String(64), nullable=False),  # sha256 of the normalised text
    Column("source_session_id", String(36), nullable=True),
    Column("source_through_seq", Integer, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("updated_at", TS, nullable=False),
    Column("superseded_by", BigId, nullable=True),  # no FK: survives the newer row's erasure
    # The personal values the content holds, sealed like a session's PII vault, so that
    # recall redacts them literally in whichever session it serves.
    Column("pii", Text, nullable=True),
    # Expiry and recall time (issue 36, migration 0014): past ``expires_at`` a memory is
    # not served and the retention sweep deletes it; ``ttl_seconds`` is what a refreshing
    # read pushes it on by; ``last_recalled_at`` is stamped by recall (at a granularity).
    Column("expires_at", TS, nullable=True),
    Column("ttl_seconds", Integer, nullable=True),
    Column("last_recalled_at", TS, nullable=True),
    Index("ix_memories_scope_recent", "tenant_type", "tenant_id", "scope_key", "updated_at"),
    postgresql_options(Index("ix_memories_expires", "tenant_type", "tenant_id", "expires_at",
                             sqlite_where=text("expires_at IS NOT NULL")),
                       where=text("expires_at IS NOT NULL")),
    Index("ix_memories_actor", "tenant_type", "tenant_id", "actor_type", "actor_id"),
    postgresql_options(Index("uq_memories_live_content", "tenant_type", "tenant_id",
                             "scope_key", "content_key", unique=True,
                             sqlite_where=text("superseded_by IS NULL")),
                       where=text("superseded_by IS NULL")),
    # PostgreSQL only, declared so autogenerate keeps it; create_memory_text_index has it too.
    postgresql_options(Index(PG_INDEX, text(f"to_tsvector('{PG_TEXT_CONFIG}', content)")),
                       using="gin").ddl_if(dialect="postgresql"),
)
event.listen(memories, "after_create", create_memory_text_index)
event.listen(memories, "before_drop", drop_memory_text_index)
# Vectors live in a side table (``memory_vectors``, see memory_index.py): on PostgreSQL its
# type exists only where pgvector does, so it is made by DDL hooks, not declared here.
event.listen(memories, "after_create", create_memory_vector_table)
event.listen(memories, "before_drop", drop_memory_vector_table)

# -- lifecycle (issue 36): holds, retention, erasures and their log -------------------------
# None of these tables holds personal content: ids, counts, times and an operator's reason.

chat_holds = Table(
    "chat_holds",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    *_ref_columns("tenant", nullable=False),
    *_ref_columns("actor", nullable=True),
    *_ref_columns("subject", nullable=True),
    Column("session_id", String(36), nullable=True),  # no FK: a held session stays anyway
    Column("reason", Text, nullable=False),
    Column("placed_by", String(255), nullable=True),
    Column("placed_at", TS, nullable=False),
    Column("released_at", TS, nullable=True),
    Index("ix_chat_holds_tenant", "tenant_type", "tenant_id", "released_at"),
)
"""Legal holds: a scope (a session, an actor, a subject, or, with none set, the whole
tenant) that delete, erase and retention refuse while the hold is not released."""

chat_retention = Table(
    "chat_retention",
    metadata,
    *_ref_columns("tenant", nullable=False),
    Column("session_idle_days", Integer, nullable=True),
    Column("memory_idle_days", Integer, nullable=True),
    Column("updated_at", TS, nullable=False),
    PrimaryKeyConstraint("tenant_type", "tenant_id", name="pk_chat_retention"),
)
"""A tenant's retention policy: sessions idle, memories not recalled or updated, this
many days are deleted by the sweep (``NULL``: kept)."""

chat_erasures = Table(
    "chat_erasures",
    metadata,
    Column("id", String(36), primary_key=True),
    *_ref_columns("tenant", nullable=False),
    Column("scope", String(16), nullable=False),  # session | actor | subject | tenant
    Column("scope_type", String(64), nullable=True),
    Column("scope_id", String(255), nullable=True),
    Column("state", String(16), nullable=False),  # running | done
    Column("counts", JSON, nullable=False, default=dict),
    Column("requested_by", String(255), nullable=True),
    Column("started_at", TS, nullable=False),
    Column("finished_at", TS, nullable=True),
    Column("digest", String(64), nullable=True),
    Index("ix_chat_erasures_scope", "tenant_type", "tenant_id", "scope", "scope_type",
          "scope_id", "state"),
)
"""Erasures as resumable jobs: the counts so far move in the same transaction as each
batch they count, so a killed run leaves exact numbers for its rerun to continue."""

chat_erased_items = Table(
    "chat_erased_items",
    metadata,
    Column("erasure_id", String(36), ForeignKey("chat_erasures.id", ondelete="CASCADE"),
           nullable=False),
    *_ref_columns("tenant", nullable=False),
    Column("surface", String(16), nullable=False),  # session | memory
    Column("item_id", String(64), nullable=False),
    PrimaryKeyConstraint("erasure_id", "surface", "item_id", name="pk_chat_erased_items"),
)
"""The ids (never text) an erasure removed: what its receipt lists and verify checks."""

chat_lifecycle_log = Table(
    "chat_lifecycle_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    *_ref_columns("tenant", nullable=False),
    Column("action", String(32), nullable=False),
    Column("scope", String(16), nullable=False),
    Column("scope_type", String(64), nullable=True),
    Column("scope_id", String(255), nullable=True),
    Column("actor_by", String(255), nullable=True),  # who asked (an operator's id)
    Column("erasure_id", String(36), nullable=True),
    Column("hold_id", BigInteger, nullable=True),
    Column("counts", JSON, nullable=False, default=dict),
    Column("digest", String(64), nullable=True),
    Column("created_at", TS, nullable=False),
    Index("ix_chat_lifecycle_log_tenant", "tenant_type", "tenant_id", "created_at"),
)
"""Who did what, when, to which scope, with what counts: the record of deletes,
erasures, holds and sweeps (no personal content)."""

# -- LangGraph checkpoints (issue 37 item 3, migration 0016): ChatkeepSaver's ----------------
# One row per checkpoint, written once (a step's write is one INSERT, whatever the
# thread's length); its channel values are stored with the checkpoint that made their
# version, and each checkpoint names the rows holding the versions it reads.

chat_checkpoints = Table(
    "chat_checkpoints",
    metadata,
    Column("session_id", String(36), ForeignKey("chat_sessions.id", ondelete="CASCADE"),
           nullable=False),
    *_ref_columns("tenant", nullable=False),
    Column("ns", String(255), nullable=False),  # the checkpoint namespace ("": the root)
    Column("checkpoint_id", String(64), nullable=False),
    Column("parent_id", String(64), nullable=True),
    # The checkpoint and its metadata (LangGraph's serializer), the channel versions it
    # reads and which rows hold them (JSON); NULL: dropped by keep_last or prune, the
    # row kept only for the values a kept checkpoint reads from it.
    Column("checkpoint", Text, nullable=True),
    Column("holders", Text, nullable=False),  # JSON: the checkpoint ids it reads from
    Column("blobs", Text, nullable=False),  # JSON: the channel values of its new versions
    Column("writes", Text, nullable=True),  # JSON: the pending writes of its tasks
    Column("created_at", TS, nullable=False),
    PrimaryKeyConstraint("session_id", "ns", "checkpoint_id", name="pk_chat_checkpoints"),
    Index("ix_chat_checkpoints_tenant", "tenant_type", "tenant_id", "session_id"),
)
"""A LangGraph checkpoint of a session's thread (``ChatkeepSaver``): its messages are
references into the session's log, its other channels LangGraph's serialized values."""

# -- quotas (issue 33): a tenant's token quota and the reservations held on it -------------
# Windows are whole epoch seconds (UTC), so a window's roll-over is the same arithmetic on
# both databases.

chat_quotas = Table(
    "chat_quotas",
    metadata,
    *_ref_columns("tenant", nullable=False),
    Column("scope_key", String(400), nullable=False),  # "" (tenant-wide) or "actor:..."
    *_ref_columns("actor", nullable=True),
    Column("tokens", BigInteger, nullable=False),
    Column("window_kind", String(16), nullable=False),  # day | month | rolling
    Column("window_seconds", Integer, nullable=False, default=0),
    Column("window_end", BigInteger, nullable=False),
    Column("spent", BigInteger, nullable=False, default=0),
    Column("reserved", BigInteger, nullable=False, default=0),
    Column("updated_at", TS, nullable=False),
    PrimaryKeyConstraint("tenant_type", "tenant_id", "scope_key", name="pk_chat_quotas"),
)
"""A quota: ``tokens`` per window for a tenant (or one of its actors); ``spent`` in the
current window (ending at ``window_end``) and ``reserved`` by calls not settled yet."""

chat_reservations = Table(
    "chat_reservations",
    metadata,
    Column("id", String(36), primary_key=True),
    *_ref_columns("tenant", nullable=False),
    Column("key_a", String(400), nullable=True),  # the quota rows it holds on
    Column("key_b", String(400), nullable=True),
    Column("tokens", BigInteger, nullable=False),
    Column("session_id", String(36), nullable=True),
    Column("purpose", String(16), nullable=False),
    Column("lease_until", BigInteger, nullable=False),
    Column("created_at", TS, nullable=False),
    sqlite_with_rowid=False,
)
"""A call's reservation until it is settled or released; one whose lease ended is counted
at its reserved amount by the sweep (a worker killed mid-call). No index beside its key
(migration 0018): it holds only the calls in flight, so the sweep reads it whole; on
SQLite its rows live in the key's b-tree (``WITHOUT ROWID``, migration 0019), so a
reservation and its settle each write one b-tree."""

# -- replay (issue 34 part 2): what each built request was made from ----------------------
# A summary's every version is kept (the fold's compare-and-set writes it), so a past
# request can be rebuilt from the store alone; the manifests hold no personal content
# (ids, seqs, counts, hashes); the texts a manifest names by digest (the system prompt,
# a literal memory, the chat config) are kept once per distinct value per session.

chat_summary_versions = Table(
    "chat_summary_versions",
    metadata,
    Column("session_id", String(36), ForeignKey("chat_sessions.id", ondelete="CASCADE"),
           nullable=False),
    *_ref_columns("tenant", nullable=False),
    Column("version", Integer, nullable=False),  # the summary_version it was stored at
    Column("watermark", Integer, nullable=False),
    Column("summary", Text, nullable=False),  # its stored form
    Column("created_at", TS, nullable=False),
    PrimaryKeyConstraint("session_id", "version", name="pk_chat_summary_versions"),
)
"""Each summary a session had, at the version its fold stored it (never overwritten)."""

chat_replay_manifests = Table(
    "chat_replay_manifests",
    metadata,
    Column("session_id", String(36), ForeignKey("chat_sessions.id", ondelete="CASCADE"),
           nullable=False),
    *_ref_columns("tenant", nullable=False),
    Column("turn", Integer, nullable=False),  # 1, 2, ... per session
    Column("last_seq", Integer, nullable=False),  # the newest message the request read
    Column("created_at", TS, nullable=False),
    # The compact manifest (chatkeep.history.manifest); NULL: the requests built before
    # the database had replay (through last_seq), which have none.
    Column("manifest", Text, nullable=True),
    PrimaryKeyConstraint("session_id", "turn", name="pk_chat_replay_manifests"),
)
"""One row per request chatkeep built for a session: what rebuilds it byte for byte."""

chat_replay_texts = Table(
    "chat_replay_texts",
    metadata,
    Column("session_id", String(36), ForeignKey("chat_sessions.id", ondelete="CASCADE"),
           nullable=False),
    *_ref_columns("tenant", nullable=False),
    Column("digest", String(32), nullable=False),
    Column("body", Text, nullable=False),
    PrimaryKeyConstraint("session_id", "digest", name="pk_chat_replay_texts"),
)
"""The texts manifests name by digest (system prompts, literal memories, the chat config
as it was), once per distinct value per session."""
