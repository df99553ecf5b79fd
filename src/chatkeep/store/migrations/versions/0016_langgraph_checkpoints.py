"""LangGraph checkpoints, one row each (issue 37 item 3): ``chat_checkpoints``; and an
index of the LangChain id a message was recorded under (``chat_messages.metadata``'s
``langchain_id``), which the LangGraph middleware looks messages up by.

``ChatkeepSaver`` kept a thread's checkpoints in its session's metadata (under
``langgraph``), one value every step rewrote; each checkpoint is now a row, written once.
The upgrade moves every session's stored checkpoints into rows (a channel value goes to
the row of the oldest checkpoint that names its version, the one that wrote it) and
removes the key; the downgrade moves them back.

Revision ID: 0016_langgraph_checkpoints
Revises: 0015_replay_manifests
Create Date: 2026-12-07
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0016_langgraph_checkpoints"
down_revision = "0015_replay_manifests"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
STATE_KEY = "langgraph"
#: The id index per dialect (as store/schema.py's MARK_INDEX and MARK_EXPRESSIONS).
MARK_INDEX = {
    "sqlite": ("ix_chat_messages_langchain_id",
               "json_extract(metadata, '$.langchain_id')"),
    "postgresql": ("ix_chat_messages_langchain_id", "(metadata ->> 'langchain_id')"),
}

_sessions = sa.table("chat_sessions", sa.column("id", sa.String()),
                     sa.column("tenant_type", sa.String()), sa.column("tenant_id", sa.String()),
                     sa.column("tenant_id_int", sa.Boolean()),
                     sa.column("metadata", sa.JSON()))


def _ref(prefix: str, nullable: bool) -> list[sa.Column[object]]:
    return [sa.Column(f"{prefix}_type", sa.String(64), nullable=nullable),
            sa.Column(f"{prefix}_id", sa.String(255), nullable=nullable),
            sa.Column(f"{prefix}_id_int", sa.Boolean(), nullable=nullable)]


def upgrade() -> None:
    checkpoints = op.create_table(
        "chat_checkpoints",
        sa.Column("session_id", sa.String(36), nullable=False),
        *_ref("tenant", False),
        sa.Column("ns", sa.String(255), nullable=False),
        sa.Column("checkpoint_id", sa.String(64), nullable=False),
        sa.Column("parent_id", sa.String(64), nullable=True),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("holders", sa.Text(), nullable=False),
        sa.Column("blobs", sa.Text(), nullable=False),
        sa.Column("writes", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["chat_sessions.id"], ondelete="CASCADE",
                                name="fk_chat_checkpoints_session_id_chat_sessions"),
        sa.PrimaryKeyConstraint("session_id", "ns", "checkpoint_id",
                                name="pk_chat_checkpoints"),
    )
    op.create_index("ix_chat_checkpoints_tenant", "chat_checkpoints",
                    ["tenant_type", "tenant_id", "session_id"])
    assert checkpoints is not None
    _move_in(op.get_bind(), checkpoints)
    index = MARK_INDEX.get(op.get_bind().dialect.name)
    if index is not None:
        op.execute(f"CREATE INDEX IF NOT EXISTS {index[0]} ON chat_messages "
                   f"(session_id, {index[1]})")


def downgrade() -> None:
    bind = op.get_bind()
    index = MARK_INDEX.get(bind.dialect.name)
    if index is not None:
        op.execute(f"DROP INDEX IF EXISTS {index[0]}")
    _move_out(bind)
    op.drop_index("ix_chat_checkpoints_tenant", table_name="chat_checkpoints")
    op.drop_table("chat_checkpoints")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _move_in(bind: sa.Connection, checkpoints: sa.Table) -> None:
    """Each session's checkpoints from its metadata into rows (then the key goes)."""
    now = datetime.now(UTC)
    found = bind.execute(sa.select(_sessions.c.id, _sessions.c.tenant_type,
                                   _sessions.c.tenant_id, _sessions.c.tenant_id_int,
                                   _sessions.c.metadata)).all()
    for session_id, tenant_type, tenant_id, tenant_int, meta in found:
        meta = json.loads(meta) if isinstance(meta, str) else meta
        if not isinstance(meta, dict) or STATE_KEY not in meta:
            continue
        state = meta.pop(STATE_KEY)
        spaces = state.get("ns") if isinstance(state, dict) else None
        rows = [row for ns, space in (spaces or {}).items()
                for row in _rows(ns, space if isinstance(space, dict) else {})]
        if rows:
            bind.execute(sa.insert(checkpoints), [
                {**row, "session_id": session_id, "tenant_type": tenant_type,
                 "tenant_id": tenant_id, "tenant_id_int": tenant_int, "created_at": now}
                for row in rows])
        bind.execute(sa.update(_sessions).where(_sessions.c.id == session_id)
                     .values(metadata=meta))


def _rows(ns: str, space: dict[str, Any]) -> list[dict[str, Any]]:
    """One namespace's rows: each value goes with the oldest checkpoint naming it."""
    cps: dict[str, Any] = space.get("cp") or {}
    blobs: dict[str, Any] = space.get("b") or {}
    writes: dict[str, Any] = space.get("w") or {}
    holder: dict[str, str] = {}
    for checkpoint_id in sorted(cps):
        for key in cps[checkpoint_id].get("k") or ():
            if key in blobs:
                holder.setdefault(key, checkpoint_id)
    rows = []
    for checkpoint_id in sorted(set(cps) | set(writes)):
        entry = cps.get(checkpoint_id)
        held = {key: blobs[key] for key, cid in holder.items() if cid == checkpoint_id}
        reads = {key: holder[key] for key in (entry or {}).get("k") or () if key in holder}
        rows.append({
            "ns": ns, "checkpoint_id": checkpoint_id,
            "parent_id": entry.get("p") if entry else None,
            "checkpoint": None if entry is None else _dumps(
                {"c": entry["c"], "m": entry["m"], "k": entry.get("k") or [],
                 "h": reads}),
            "holders": _dumps(sorted(set(reads.values()))),
            "blobs": _dumps(held),
            "writes": _dumps(writes[checkpoint_id]) if checkpoint_id in writes else None})
    return rows


def _move_out(bind: sa.Connection) -> None:
    """The rows back into their sessions' metadata, as the saver kept them before."""
    table = sa.table("chat_checkpoints", *(sa.column(c) for c in (
        "session_id", "ns", "checkpoint_id", "parent_id", "checkpoint", "blobs", "writes")))
    spaces: dict[str, dict[str, Any]] = {}
    for row in bind.execute(sa.select(table)).mappings():
        space = spaces.setdefault(row["session_id"], {}).setdefault(
            row["ns"], {"cp": {}, "w": {}, "b": {}})
        space["b"].update(json.loads(row["blobs"]))
        if row["writes"] is not None:
            space["w"][row["checkpoint_id"]] = json.loads(row["writes"])
        if row["checkpoint"] is not None:
            entry = json.loads(row["checkpoint"])
            space["cp"][row["checkpoint_id"]] = {"c": entry["c"], "m": entry["m"],
                                                 "p": row["parent_id"], "k": entry["k"]}
    for session_id, by_ns in spaces.items():
        meta = bind.execute(sa.select(_sessions.c.metadata)
                            .where(_sessions.c.id == session_id)).scalar_one()
        meta = json.loads(meta) if isinstance(meta, str) else dict(meta or {})
        meta[STATE_KEY] = {"ns": by_ns}
        bind.execute(sa.update(_sessions).where(_sessions.c.id == session_id)
                     .values(metadata=meta))
