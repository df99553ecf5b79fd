"""Replay manifests and summary versions (issue 34 part 2): ``chat_summary_versions``
(every summary a session had, at its version), ``chat_replay_manifests`` (what each built
request was made from) and ``chat_replay_texts`` (the texts those name by digest).

Existing sessions get their current summary as its version, and, when they hold
messages, turn 1 without a manifest: the requests built before replay existed.

Revision ID: 0015_replay_manifests
Revises: 0014_memory_expiry
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_replay_manifests"
down_revision = "0014_memory_expiry"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
TENANT = ("tenant_type", "tenant_id", "tenant_id_int")


def _tenant() -> list[sa.Column[object]]:
    return [sa.Column("tenant_type", sa.String(64), nullable=False),
            sa.Column("tenant_id", sa.String(255), nullable=False),
            sa.Column("tenant_id_int", sa.Boolean(), nullable=False)]


def _session_id(table: str) -> sa.Column[object]:
    return sa.Column("session_id", sa.String(36), sa.ForeignKey(
        "chat_sessions.id", ondelete="CASCADE", name=f"fk_{table}_session_id_chat_sessions"),
        nullable=False)


def upgrade() -> None:
    op.create_table(
        "chat_summary_versions", _session_id("chat_summary_versions"), *_tenant(),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("watermark", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "version", name="pk_chat_summary_versions"))
    op.create_table(
        "chat_replay_manifests", _session_id("chat_replay_manifests"), *_tenant(),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("manifest", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("session_id", "turn", name="pk_chat_replay_manifests"))
    op.create_table(
        "chat_replay_texts", _session_id("chat_replay_texts"), *_tenant(),
        sa.Column("digest", sa.String(32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "digest", name="pk_chat_replay_texts"))
    tenant = ", ".join(TENANT)
    op.execute(
        f"INSERT INTO chat_summary_versions (session_id, {tenant}, version, watermark, "
        f"summary, created_at) SELECT id, {tenant}, summary_version, summary_watermark, "
        "summary, last_message_at FROM chat_sessions WHERE summary IS NOT NULL")
    op.execute(
        f"INSERT INTO chat_replay_manifests (session_id, {tenant}, turn, last_seq, "
        f"created_at, manifest) SELECT id, {tenant}, 1, last_seq, last_message_at, NULL "
        "FROM chat_sessions WHERE last_seq > 0")


def downgrade() -> None:
    op.drop_table("chat_replay_texts")
    op.drop_table("chat_replay_manifests")
    op.drop_table("chat_summary_versions")
