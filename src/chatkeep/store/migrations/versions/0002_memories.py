"""Memories: the memories table, its full-text index, and the distil lease on sessions.

Revision ID: 0002_memories
Revises: 0001_core
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chatkeep.store.memory_index import create_memory_text_index, drop_memory_text_index

revision = "0002_memories"
down_revision = "0001_core"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)
LIVE = "superseded_by IS NULL"


def _ref(prefix: str, nullable: bool) -> list[sa.Column]:  # type: ignore[type-arg]
    return [sa.Column(f"{prefix}_type", sa.String(64), nullable=nullable),
            sa.Column(f"{prefix}_id", sa.String(255), nullable=nullable),
            sa.Column(f"{prefix}_id_int", sa.Boolean(), nullable=nullable)]


def upgrade() -> None:
    op.add_column("chat_sessions", sa.Column("distil_lease_until", TS, nullable=True))
    op.create_table(
        "memories",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        *_ref("tenant", False), *_ref("subject", True), *_ref("actor", True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("scope_key", sa.String(400), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_key", sa.String(64), nullable=False),
        sa.Column("source_session_id", sa.String(36), nullable=True),
        sa.Column("source_through_seq", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("superseded_by", BigId, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_memories"),
    )
    op.create_index("ix_memories_scope_recent", "memories",
                    ["tenant_type", "tenant_id", "scope_key", "updated_at"])
    op.create_index("ix_memories_actor", "memories",
                    ["tenant_type", "tenant_id", "actor_type", "actor_id"])
    op.create_index("uq_memories_live_content", "memories",
                    ["tenant_type", "tenant_id", "scope_key", "content_key"], unique=True,
                    sqlite_where=sa.text(LIVE), postgresql_where=sa.text(LIVE))
    create_memory_text_index(None, op.get_bind())


def downgrade() -> None:
    drop_memory_text_index(None, op.get_bind())
    op.drop_index("uq_memories_live_content", table_name="memories")
    op.drop_index("ix_memories_actor", table_name="memories")
    op.drop_index("ix_memories_scope_recent", table_name="memories")
    op.drop_table("memories")
    op.drop_column("chat_sessions", "distil_lease_until")
