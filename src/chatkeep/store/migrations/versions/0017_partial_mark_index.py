"""The LangChain id's index holds only the messages that carry one (issue 37, the append's
cost): ``ix_chat_messages_langchain_id`` becomes partial,
``WHERE <the id's expression> IS NOT NULL``.

Made by 0016 over every message, it took an entry (a ``json_extract`` and an index page
written) for each append, a LangChain message or not; most messages carry no LangChain
id. The lookups by id (``<expression> IN (...)``) imply the predicate, so both planners
still probe the index. The downgrade makes it whole again.

Revision ID: 0017_partial_mark_index
Revises: 0016_langgraph_checkpoints
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0017_partial_mark_index"
down_revision = "0016_langgraph_checkpoints"
branch_labels = None
depends_on = None

#: The id index per dialect (as store/schema.py's MARK_INDEX and MARK_EXPRESSIONS).
MARK_INDEX = {
    "sqlite": ("ix_chat_messages_langchain_id",
               "json_extract(metadata, '$.langchain_id')"),
    "postgresql": ("ix_chat_messages_langchain_id", "(metadata ->> 'langchain_id')"),
}


def _make(partial: bool) -> None:
    index = MARK_INDEX.get(op.get_bind().dialect.name)
    if index is None:
        return
    name, expression = index
    op.execute(f"DROP INDEX IF EXISTS {name}")
    where = f" WHERE {expression} IS NOT NULL" if partial else ""
    op.execute(f"CREATE INDEX {name} ON chat_messages (session_id, {expression}){where}")


def upgrade() -> None:
    _make(partial=True)


def downgrade() -> None:
    _make(partial=False)
