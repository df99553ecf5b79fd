"""Forgetting (issue 36): the ledger no longer cascades on the session (a deleted session
leaves its usage as numbers, ``session_id`` set to NULL), and the lifecycle's tables:
legal holds, retention policies, resumable erasures with the ids they removed, and the
lifecycle log.

Revision ID: 0012_lifecycle
Revises: 0011_fold_history
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_lifecycle"
down_revision = "0011_fold_history"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)
USAGE_FK = "fk_chat_usage_session_id_chat_sessions"


def _ref(prefix: str, nullable: bool) -> list[sa.Column[object]]:
    return [sa.Column(f"{prefix}_type", sa.String(64), nullable=nullable),
            sa.Column(f"{prefix}_id", sa.String(255), nullable=nullable),
            sa.Column(f"{prefix}_id_int", sa.Boolean(), nullable=nullable)]


def upgrade() -> None:
    # chat_usage has no dependents, so SQLite's table rebuild is safe here.
    with op.batch_alter_table("chat_usage") as batch:
        batch.drop_constraint(USAGE_FK, type_="foreignkey")
        batch.alter_column("session_id", existing_type=sa.String(36), nullable=True)
    op.create_table(
        "chat_holds",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        *_ref("tenant", False), *_ref("actor", True), *_ref("subject", True),
        sa.Column("session_id", sa.String(36), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("placed_by", sa.String(255), nullable=True),
        sa.Column("placed_at", TS, nullable=False),
        sa.Column("released_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_chat_holds"),
    )
    op.create_index("ix_chat_holds_tenant", "chat_holds",
                    ["tenant_type", "tenant_id", "released_at"])
    op.create_table(
        "chat_retention",
        *_ref("tenant", False),
        sa.Column("session_idle_days", sa.Integer(), nullable=True),
        sa.Column("memory_idle_days", sa.Integer(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("tenant_type", "tenant_id", name="pk_chat_retention"),
    )
    op.create_table(
        "chat_erasures",
        sa.Column("id", sa.String(36), nullable=False),
        *_ref("tenant", False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("scope_type", sa.String(64), nullable=True),
        sa.Column("scope_id", sa.String(255), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("requested_by", sa.String(255), nullable=True),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("digest", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_chat_erasures"),
    )
    op.create_index("ix_chat_erasures_scope", "chat_erasures",
                    ["tenant_type", "tenant_id", "scope", "scope_type", "scope_id", "state"])
    op.create_table(
        "chat_erased_items",
        sa.Column("erasure_id", sa.String(36), nullable=False),
        *_ref("tenant", False),
        sa.Column("surface", sa.String(16), nullable=False),
        sa.Column("item_id", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(["erasure_id"], ["chat_erasures.id"], ondelete="CASCADE",
                                name="fk_chat_erased_items_erasure_id_chat_erasures"),
        sa.PrimaryKeyConstraint("erasure_id", "surface", "item_id",
                                name="pk_chat_erased_items"),
    )
    op.create_table(
        "chat_lifecycle_log",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        *_ref("tenant", False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("scope_type", sa.String(64), nullable=True),
        sa.Column("scope_id", sa.String(255), nullable=True),
        sa.Column("actor_by", sa.String(255), nullable=True),
        sa.Column("erasure_id", sa.String(36), nullable=True),
        sa.Column("hold_id", sa.BigInteger(), nullable=True),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_lifecycle_log"),
    )
    op.create_index("ix_chat_lifecycle_log_tenant", "chat_lifecycle_log",
                    ["tenant_type", "tenant_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_chat_lifecycle_log_tenant", table_name="chat_lifecycle_log")
    op.drop_table("chat_lifecycle_log")
    op.drop_table("chat_erased_items")
    op.drop_index("ix_chat_erasures_scope", table_name="chat_erasures")
    op.drop_table("chat_erasures")
    op.drop_table("chat_retention")
    op.drop_index("ix_chat_holds_tenant", table_name="chat_holds")
    op.drop_table("chat_holds")
    # Usage rows of deleted sessions have no session to point at any more: they keep
    # their numbers (unlinked), and the column stays nullable.
    op.execute("UPDATE chat_usage SET session_id = NULL WHERE session_id IS NOT NULL "
               "AND session_id NOT IN (SELECT id FROM chat_sessions)")
    with op.batch_alter_table("chat_usage") as batch:
        batch.create_foreign_key(USAGE_FK, "chat_sessions", ["session_id"], ["id"],
                                 ondelete="CASCADE")
