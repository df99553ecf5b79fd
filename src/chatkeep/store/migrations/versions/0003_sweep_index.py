"""The sweep's index covers only sessions with undistilled messages.

A plain index on ``last_message_at`` made every sweep walk past all the fully
distilled sessions, a set that only grows; the partial index holds just the
sessions the sweep can claim.

Revision ID: 0003_sweep_index
Revises: 0002_memories
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_sweep_index"
down_revision = "0002_memories"
branch_labels = None
depends_on = None

UNDISTILLED = "last_seq > distilled_through"


def upgrade() -> None:
    op.drop_index("ix_chat_sessions_last_message_at", table_name="chat_sessions")
    op.create_index("ix_chat_sessions_undistilled", "chat_sessions", ["last_message_at"],
                    sqlite_where=sa.text(UNDISTILLED), postgresql_where=sa.text(UNDISTILLED))


def downgrade() -> None:
    op.drop_index("ix_chat_sessions_undistilled", table_name="chat_sessions")
    op.create_index("ix_chat_sessions_last_message_at", "chat_sessions", ["last_message_at"])
