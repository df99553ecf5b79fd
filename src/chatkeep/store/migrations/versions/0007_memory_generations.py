"""Memory generations (SQLite): a per-tenant stamp that triggers renew on every write that
could change the tenant's live vectors, so vector search validates its cached scope with
one primary-key lookup instead of an aggregate over the scope.

New databases get it with the vector table (``create_memory_vector_table``); this adds it
to databases made before, and drops the covering index ``memory_vectors_model`` that
served the aggregate (nothing else reads it). PostgreSQL: nothing (no cache there). A later
migration that rebuilds ``memories`` on SQLite (``batch_alter_table`` recreating it) drops
the triggers with the table, and must run ``create_memory_generations`` again.

Revision ID: 0007_memory_generations
Revises: 0006_memory_vectors
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

from chatkeep.store.memory_index import (
    VECTOR_TABLE,
    create_memory_generations,
    drop_memory_generations,
)

revision = "0007_memory_generations"
down_revision = "0006_memory_vectors"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    create_memory_generations(None, bind)
    if bind.dialect.name == "sqlite":
        op.execute(f"DROP INDEX IF EXISTS {VECTOR_TABLE}_model")


def downgrade() -> None:
    bind = op.get_bind()
    drop_memory_generations(None, bind)
    if bind.dialect.name == "sqlite":
        op.execute(f"CREATE INDEX IF NOT EXISTS {VECTOR_TABLE}_model ON {VECTOR_TABLE} "
                   "(memory_id, model, dim)")
