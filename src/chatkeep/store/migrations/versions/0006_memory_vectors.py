"""Memory vectors: the ``memory_vectors`` side table (SQLite blobs; PostgreSQL pgvector).

On PostgreSQL the table is created only where the pgvector extension is available
(the extension is created if needed); elsewhere nothing happens and recall stays
full-text only. ``MemoryService`` creates it later if pgvector is installed after this
migration ran and ``memory.embedding_model`` is set, and says which extension is
missing when it cannot. The HNSW index is per dimension, made with the first vector
of that dimension.

Revision ID: 0006_memory_vectors
Revises: 0005_memory_pii
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

from chatkeep.store.memory_index import create_memory_vector_table, drop_memory_vector_table

revision = "0006_memory_vectors"
down_revision = "0005_memory_pii"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_memory_vector_table(None, op.get_bind())


def downgrade() -> None:
    drop_memory_vector_table(None, op.get_bind())
