"""Sessions carry the application's own name for the conversation (``key``: the Agents
SDK's ``session_id``, Pydantic AI's ``conversation_id``, LangGraph's ``thread_id``), unique
per tenant, so ``keep.sessions.open(key, tenant=...)`` finds or creates one session.

A unique index rather than a constraint: both backends add it without rebuilding the
table, and NULL keys (sessions known only by their id) never collide.

Revision ID: 0009_session_key
Revises: 0008_session_pii_protected
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_session_key"
down_revision = "0008_session_pii_protected"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("chat_sessions", sa.Column("key", sa.String(255), nullable=True))
    op.create_index("uq_chat_sessions_tenant_key", "chat_sessions",
                    ["tenant_type", "tenant_id", "key"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_chat_sessions_tenant_key", table_name="chat_sessions")
    op.drop_column("chat_sessions", "key")
