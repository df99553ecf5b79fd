"""LangGraph checkpoints, one row each (issue 37 item 3): reserved slot in the chain.

Revision ID: 0016_langgraph_checkpoints
Revises: 0015_replay_manifests
Create Date: 2026-12-07
"""

from __future__ import annotations

revision = "0016_langgraph_checkpoints"
down_revision = "0015_replay_manifests"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing yet: this revision's tables are being written this stop."""


def downgrade() -> None:
    """Nothing to undo."""
