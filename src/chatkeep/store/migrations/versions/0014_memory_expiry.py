"""Memory expiry and recall times (issue 36 item 7): ``memories.expires_at`` (set: the
memory is not served after it, and the retention sweep deletes it), ``ttl_seconds`` (set:
a read that refreshes may push ``expires_at`` on by it, LangGraph's ``refresh_on_read``)
and ``last_recalled_at`` (when recall last served it, stamped at a bounded granularity),
so that "memories not recalled or updated for N days" means what it says.

SQLite: the generation trigger on updates of ``memories`` (migration 0007) is made again
to fire on updates of the other columns only, so stamping a recall time or moving an
expiry keeps the vector search's cached scopes.

Revision ID: 0014_memory_expiry
Revises: 0013_quotas
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chatkeep.store.memory_index import recreate_update_trigger

revision = "0014_memory_expiry"
down_revision = "0013_quotas"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
EXPIRING = sa.text("expires_at IS NOT NULL")


def upgrade() -> None:
    # Plain ADD COLUMNs on both backends (no table rebuild on SQLite).
    op.add_column("memories", sa.Column("expires_at", TS, nullable=True))
    op.add_column("memories", sa.Column("ttl_seconds", sa.Integer(), nullable=True))
    op.add_column("memories", sa.Column("last_recalled_at", TS, nullable=True))
    op.create_index("ix_memories_expires", "memories",
                    ["tenant_type", "tenant_id", "expires_at"],
                    sqlite_where=EXPIRING, postgresql_where=EXPIRING)
    recreate_update_trigger(op.get_bind(), recall_columns=True)


def downgrade() -> None:
    recreate_update_trigger(op.get_bind(), recall_columns=False)
    op.drop_index("ix_memories_expires", table_name="memories")
    # Plain DROP COLUMNs (SQLite 3.35+): a batch rebuild would drop the memories' triggers.
    op.drop_column("memories", "last_recalled_at")
    op.drop_column("memories", "ttl_seconds")
    op.drop_column("memories", "expires_at")
