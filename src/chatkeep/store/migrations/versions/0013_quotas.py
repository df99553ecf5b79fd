"""Per-tenant token quotas (issue 33): ``chat_quotas`` (a tenant's or an actor's tokens
per window, with what the window spent and what calls hold reserved) and
``chat_reservations`` (each call's reservation and its lease).

Revision ID: 0013_quotas
Revises: 0012_lifecycle
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_quotas"
down_revision = "0012_lifecycle"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def _ref(prefix: str, nullable: bool) -> list[sa.Column[object]]:
    return [sa.Column(f"{prefix}_type", sa.String(64), nullable=nullable),
            sa.Column(f"{prefix}_id", sa.String(255), nullable=nullable),
            sa.Column(f"{prefix}_id_int", sa.Boolean(), nullable=nullable)]


def upgrade() -> None:
    op.create_table(
        "chat_quotas",
        *_ref("tenant", False),
        sa.Column("scope_key", sa.String(400), nullable=False),
        *_ref("actor", True),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("window_kind", sa.String(16), nullable=False),
        sa.Column("window_seconds", sa.Integer(), nullable=False),
        sa.Column("window_end", sa.BigInteger(), nullable=False),
        sa.Column("spent", sa.BigInteger(), nullable=False),
        sa.Column("reserved", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("tenant_type", "tenant_id", "scope_key",
                                name="pk_chat_quotas"),
    )
    op.create_table(
        "chat_reservations",
        sa.Column("id", sa.String(36), nullable=False),
        *_ref("tenant", False),
        sa.Column("key_a", sa.String(400), nullable=True),
        sa.Column("key_b", sa.String(400), nullable=True),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(36), nullable=True),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("lease_until", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_reservations"),
    )
    op.create_index("ix_chat_reservations_lease", "chat_reservations", ["lease_until"])


def downgrade() -> None:
    op.drop_index("ix_chat_reservations_lease", table_name="chat_reservations")
    op.drop_table("chat_reservations")
    op.drop_table("chat_quotas")
