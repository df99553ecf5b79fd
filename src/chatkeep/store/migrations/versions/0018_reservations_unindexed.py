"""A reservation writes one b-tree, not two (issue 33, the quota turn's cost):
``ix_chat_reservations_lease`` is dropped.

``chat_reservations`` holds only the calls in flight: a row is written before the call
and deleted when it is settled, so the index on ``lease_until`` cost an entry written
and removed per model call, to serve the sweep's search for expired leases over a
table that is never larger than the calls running at once (and the leftovers of
killed workers until the sweep counts them). The sweep now reads that small table
whole. The downgrade builds the index again.

Revision ID: 0018_reservations_unindexed
Revises: 0017_partial_mark_index
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0018_reservations_unindexed"
down_revision = "0017_partial_mark_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_chat_reservations_lease", table_name="chat_reservations")


def downgrade() -> None:
    op.create_index("ix_chat_reservations_lease", "chat_reservations", ["lease_until"])
