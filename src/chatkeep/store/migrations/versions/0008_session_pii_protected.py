"""Sessions record that the application redacted them (``pii_protected``), so a process
started without ``privacy.anonymize_pii`` (a sweep, a worker on default config) still
redacts them instead of sending their text raw.

Sessions that already hold a placeholder vault were redacted: they start protected.
The others start unprotected, as they were created (nothing records the switch then).

Revision ID: 0008_session_pii_protected
Revises: 0007_memory_generations
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_session_pii_protected"
down_revision = "0007_memory_generations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN on both backends (no batch: SQLite would rebuild the table for a
    # default given as an expression).
    op.add_column("chat_sessions", sa.Column("pii_protected", sa.Boolean(), nullable=False,
                                             server_default=sa.false()))
    sessions = sa.table("chat_sessions", sa.column("pii_vault", sa.Text()),
                        sa.column("pii_protected", sa.Boolean()))
    op.execute(sessions.update().where(sessions.c.pii_vault.is_not(None))
               .values(pii_protected=True))


def downgrade() -> None:
    op.drop_column("chat_sessions", "pii_protected")
