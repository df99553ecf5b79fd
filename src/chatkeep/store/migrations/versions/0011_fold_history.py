"""Each stored fold is recorded (``chat_folds``): the seqs it took, its summarizer calls
and their tokens, written in the summary's compare-and-set (issue 24: the inspector's
fold history).

Revision ID: 0011_fold_history
Revises: 0010_fold_lease
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_fold_history"
down_revision = "0010_fold_lease"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chat_folds",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(36),
                  sa.ForeignKey("chat_sessions.id", ondelete="CASCADE",
                                name="fk_chat_folds_session_id_chat_sessions"),
                  nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("from_seq", sa.Integer(), nullable=False),
        sa.Column("through_seq", sa.Integer(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_folds"),
    )
    op.create_index("ix_chat_folds_session", "chat_folds", ["session_id", "version"])


def downgrade() -> None:
    op.drop_index("ix_chat_folds_session", table_name="chat_folds")
    op.drop_table("chat_folds")
