"""The bounded read's rows as ``Message``s: ``store.newest.read_newest_rows`` on the
engine's transport with ``live_message``, the reference the tests hold the Agents SDK's
bounded read and the store's one-statement read to."""

from __future__ import annotations

from sqlalchemy import Engine

from chatkeep.messages import Message
from chatkeep.store.direct import driver_transport
from chatkeep.store.executor import CoreTransport, Row
from chatkeep.store.newest import live_message, read_newest_rows


def newest_live(engine: Engine, session_id: str, limit: int) -> tuple[int, list[Message]]:
    """The session's summary watermark and its newest ``limit`` live messages, oldest
    first (without ``created_at``, ``tokens`` and ``metadata``)."""
    def messages(watermark: int, rows: list[Row]) -> tuple[int, list[Message]]:
        return watermark, [live_message(session_id, row) for row in rows]

    transport = driver_transport(engine) or CoreTransport(engine)
    return transport.run(read_newest_rows, session_id, limit, messages)
