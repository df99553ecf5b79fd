"""On SQLite, ``chat_reservations`` is a ``WITHOUT ROWID`` table (issue 33, the quota
turn's cost): its rows are kept in the b-tree of their key.

A rowid table keeps each row in a b-tree of rowids and its key in an index beside it, so
a reservation's insert and its settle's delete each wrote two b-trees. The table holds
only the calls in flight, keyed by a time-ordered id, and is read by that key (and whole,
by the sweep): one b-tree serves every use. PostgreSQL has no such choice and is left
alone. The upgrade and the downgrade copy the rows in flight into the rebuilt table.

Revision ID: 0019_reservations_without_rowid
Revises: 0018_reservations_unindexed
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_reservations_without_rowid"
down_revision = "0018_reservations_unindexed"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
COLUMNS = ("id, tenant_type, tenant_id, tenant_id_int, key_a, key_b, tokens, session_id, "
           "purpose, lease_until, created_at")


def _rebuild(with_rowid: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.create_table(
        "chat_reservations_rebuilt",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant_type", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(255), nullable=False),
        sa.Column("tenant_id_int", sa.Boolean(), nullable=False),
        sa.Column("key_a", sa.String(400), nullable=True),
        sa.Column("key_b", sa.String(400), nullable=True),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(36), nullable=True),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("lease_until", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_reservations"),
        sqlite_with_rowid=with_rowid,
    )
    op.execute(f"INSERT INTO chat_reservations_rebuilt ({COLUMNS}) "
               f"SELECT {COLUMNS} FROM chat_reservations")
    op.drop_table("chat_reservations")
    op.rename_table("chat_reservations_rebuilt", "chat_reservations")


def upgrade() -> None:
    _rebuild(with_rowid=False)


def downgrade() -> None:
    _rebuild(with_rowid=True)
