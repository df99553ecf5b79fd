"""Agent turns: provider-native payloads on messages, and an index for pinned instructions.

``chat_messages.native`` holds what must go back to a provider unmodified (OpenAI
Responses reasoning items with ``encrypted_content``, Anthropic thinking blocks with
their ``signature``). The partial index lets ``build_history`` read a session's
system messages (replayed pinned, never folded) below the summary watermark.

Revision ID: 0004_turns
Revises: 0003_sweep_index
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_turns"
down_revision = "0003_sweep_index"
branch_labels = None
depends_on = None

SYSTEM_ROLE = "role = 'system'"


def upgrade() -> None:
    with op.batch_alter_table("chat_messages") as batch:
        batch.add_column(sa.Column("native", sa.JSON(), nullable=True))
    op.create_index("ix_chat_messages_system", "chat_messages", ["session_id", "seq"],
                    sqlite_where=sa.text(SYSTEM_ROLE), postgresql_where=sa.text(SYSTEM_ROLE))


def downgrade() -> None:
    op.drop_index("ix_chat_messages_system", table_name="chat_messages")
    with op.batch_alter_table("chat_messages") as batch:
        batch.drop_column("native")
