"""Core tables: sessions, messages, tool calls, usage ledger.

Revision ID: 0001_core
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_core"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def _ref(prefix: str, nullable: bool) -> list[sa.Column]:  # type: ignore[type-arg]
    return [sa.Column(f"{prefix}_type", sa.String(64), nullable=nullable),
            sa.Column(f"{prefix}_id", sa.String(255), nullable=nullable),
            sa.Column(f"{prefix}_id_int", sa.Boolean(), nullable=nullable)]


def upgrade() -> None:
    op.create_table(
        "chat_sessions",
        sa.Column("id", sa.String(36), nullable=False),
        *_ref("tenant", False), *_ref("actor", True), *_ref("subject", True),
        sa.Column("title", sa.String(255), nullable=True),
        sa.Column("anonymize_pii", sa.Boolean(), nullable=False),
        sa.Column("total_tokens", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("summary_watermark", sa.Integer(), nullable=False),
        sa.Column("summary_version", sa.Integer(), nullable=False),
        sa.Column("distilled_through", sa.Integer(), nullable=False),
        sa.Column("distil_version", sa.Integer(), nullable=False),
        sa.Column("pii_vault", sa.Text(), nullable=True),
        sa.Column("pii_vault_version", sa.Integer(), nullable=False),
        sa.Column("closed_at", TS, nullable=True),
        sa.Column("last_message_at", TS, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_sessions"),
    )
    op.create_index("ix_chat_sessions_tenant_recent", "chat_sessions",
                    ["tenant_type", "tenant_id", "last_message_at"])
    op.create_index("ix_chat_sessions_last_message_at", "chat_sessions", ["last_message_at"])

    op.create_table(
        "chat_messages",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("tool_calls", sa.JSON(), nullable=True),
        sa.Column("tool_call_id", sa.String(255), nullable=True),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["chat_sessions.id"], ondelete="CASCADE",
                                name="fk_chat_messages_session_id_chat_sessions"),
        sa.PrimaryKeyConstraint("id", name="pk_chat_messages"),
        sa.UniqueConstraint("session_id", "seq", name="uq_chat_messages_session_seq"),
    )

    op.create_table(
        "chat_tool_calls",
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("call_seq", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("result_seq", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["session_id"], ["chat_sessions.id"], ondelete="CASCADE",
                                name="fk_chat_tool_calls_session_id_chat_sessions"),
        sa.PrimaryKeyConstraint("session_id", "call_id", name="pk_chat_tool_calls"),
    )

    op.create_table(
        "chat_usage",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(36), nullable=False),
        *_ref("tenant", False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("model", sa.String(255), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["chat_sessions.id"], ondelete="CASCADE",
                                name="fk_chat_usage_session_id_chat_sessions"),
        sa.PrimaryKeyConstraint("id", name="pk_chat_usage"),
    )
    op.create_index("ix_chat_usage_tenant_time", "chat_usage",
                    ["tenant_type", "tenant_id", "created_at"])
    op.create_index("ix_chat_usage_session", "chat_usage", ["session_id"])


def downgrade() -> None:
    op.drop_table("chat_usage")
    op.drop_table("chat_tool_calls")
    op.drop_table("chat_messages")
    op.drop_index("ix_chat_sessions_last_message_at", table_name="chat_sessions")
    op.drop_index("ix_chat_sessions_tenant_recent", table_name="chat_sessions")
    op.drop_table("chat_sessions")
