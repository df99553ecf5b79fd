"""``ChatkeepSession.get_items(limit)`` under the async API on SQLite is one trip to a
thread (issue 37, point 2): the read is one statement (``store.newest.read_newest_rows``)
on the keep's read lane, its rows made items there, without the bridge; it was three
trips and three bridge calls, then one trip through the bridge. A redacting session
still refuses a read outside ``session.run`` before anything is read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from chatkeep import PrivacyError, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession

ORG = Ref("organization", 1)


def exchange(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"question {i}"},
            {"type": "message", "role": "assistant", "id": f"m{i}", "status": "completed",
             "content": [{"type": "output_text", "text": f"answer {i}", "annotations": []}]}]


def test_a_bounded_read_is_one_trip(tmp_path: Path, trips: list[str]) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'a.db'}", dispatcher="inline",
                             config={"privacy": {"anonymize_pii": False}})
        try:
            session = await ChatkeepSession.open(keep, tenant=ORG, anonymize_pii=False)
            items = [item for i in range(30) for item in exchange(i)]
            await session.add_items(items)
            trips.clear()
            assert await session.get_items(limit=3) == items[-3:]
            assert trips == ["_configure", "whole"]  # the lane opened, then the read
            for limit in (1, 2, 20, 60):
                trips.clear()
                assert await session.get_items(limit=limit) == items[-limit:]
                assert len(trips) == 1, (limit, trips)
        finally:
            await keep.close()

    asyncio.run(main())


def test_a_redacting_session_refuses_before_reading(tmp_path: Path,
                                                    trips: list[str]) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'b.db'}", dispatcher="inline",
                             config={"privacy": {"anonymize_pii": True}})
        try:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.add_items([
                *exchange(1), {"role": "user", "content": "mail me at kari.nordmann@example.com"}])
            for limit in (None, 0, 2):
                trips.clear()
                with pytest.raises(PrivacyError, match="redacts personal data"):
                    await session.get_items(limit=limit)
                assert trips == []
            newest = await session.read_items(limit=1)  # the filter installed: redacted
            assert len(newest) == 1 and "kari.nordmann" not in str(newest)
        finally:
            await keep.close()

    asyncio.run(main())
