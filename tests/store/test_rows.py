"""Rows are converted by position (``chatkeep.store.rows``): the field lists must be the
columns the statements (``chatkeep.store.statements``) select, in order."""

from __future__ import annotations

import time
import uuid

from chatkeep.store.rows import MESSAGE_FIELDS, SESSION_FIELDS, time_ordered_id
from chatkeep.store.schema import chat_sessions
from chatkeep.store.statements import (
    CLAIM_SEQ,
    MESSAGE_COLUMNS,
    PG_APPEND,
    SESSION_BY_ID,
    SET_SUMMARY,
    UNSUMMARIZED,
)


def test_row_conversions_read_the_columns_every_read_selects() -> None:
    """A column added to the table without the field lists fails here, not in use."""
    assert tuple(c.name for c in chat_sessions.columns) == SESSION_FIELDS
    assert tuple(c.name for c in SESSION_BY_ID.selected_columns) == SESSION_FIELDS
    for statement in (*PG_APPEND.values(), CLAIM_SEQ, SET_SUMMARY):
        assert tuple(c.name for c in statement.exported_columns) == SESSION_FIELDS
    assert tuple(c.name for c in MESSAGE_COLUMNS) == MESSAGE_FIELDS
    assert tuple(c.name for c in UNSUMMARIZED.selected_columns) == MESSAGE_FIELDS


def test_time_ordered_ids_are_version_7_uuids_in_creation_order() -> None:
    before = int(time.time() * 1000)
    ids = [time_ordered_id() for _ in range(500)]
    after = int(time.time() * 1000)
    assert len(set(ids)) == 500
    for text in ids:
        value = uuid.UUID(text)
        assert str(value) == text and value.version == 7 and value.variant == uuid.RFC_4122
        assert before <= value.int >> 80 <= after  # its first 48 bits: the milliseconds
    stamps = [uuid.UUID(text).int >> 80 for text in ids]
    assert stamps == sorted(stamps)
