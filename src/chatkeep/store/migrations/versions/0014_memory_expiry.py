"""Memory expiry and recall times (issue 36 item 7): reserved slot in the chain.

Revision ID: 0014_memory_expiry
Revises: 0013_quotas
Create Date: 2026-12-07
"""

from __future__ import annotations

revision = "0014_memory_expiry"
down_revision = "0013_quotas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing yet: this revision's tables are being written this stop."""


def downgrade() -> None:
    """Nothing to undo."""
