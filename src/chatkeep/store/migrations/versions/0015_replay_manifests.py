"""Replay manifests and summary versions (issue 34 part 2): reserved slot in the chain.

Revision ID: 0015_replay_manifests
Revises: 0014_memory_expiry
Create Date: 2026-12-07
"""

from __future__ import annotations

revision = "0015_replay_manifests"
down_revision = "0014_memory_expiry"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing yet: this revision's tables are being written this stop."""


def downgrade() -> None:
    """Nothing to undo."""
