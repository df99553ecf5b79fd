"""Memories carry the personal values they hold (sealed), so recall redacts them literally;
messages can be retracted (kept for the record, never replayed, summarized or distilled).

Revision ID: 0005_memory_pii
Revises: 0004_turns
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_memory_pii"
down_revision = "0004_turns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("memories") as batch:
        batch.add_column(sa.Column("pii", sa.Text(), nullable=True))
    with op.batch_alter_table("chat_messages") as batch:
        batch.add_column(sa.Column("retracted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_messages") as batch:
        batch.drop_column("retracted_at")
    with op.batch_alter_table("memories") as batch:
        batch.drop_column("pii")
