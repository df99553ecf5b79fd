"""A fold claims its step before it calls the summarizer (a lease with an expiry, so a
dead claimant never blocks the session), and failed folds back off (issue 22).

Revision ID: 0010_fold_lease
Revises: 0009_session_key
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_fold_lease"
down_revision = "0009_session_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs on both backends (no table rebuild on SQLite).
    op.add_column("chat_sessions", sa.Column("fold_lease_until", sa.DateTime(timezone=True),
                                             nullable=True))
    op.add_column("chat_sessions", sa.Column("fold_failures", sa.Integer(), nullable=False,
                                             server_default=sa.text("0")))
    op.add_column("chat_sessions", sa.Column("fold_retry_at", sa.DateTime(timezone=True),
                                             nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMNs (SQLite 3.35+): a batch rebuild would drop chat_sessions, and
    # with foreign keys on, its messages with it.
    op.drop_column("chat_sessions", "fold_retry_at")
    op.drop_column("chat_sessions", "fold_failures")
    op.drop_column("chat_sessions", "fold_lease_until")
