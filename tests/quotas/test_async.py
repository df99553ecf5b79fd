"""The async twin of ``keep.quotas``: the same calls awaited, the reservation an
``AsyncReservation`` whose ``async with`` releases on an exception and counts the
reserved amount when the block ends unsettled."""

from __future__ import annotations

import asyncio

import pytest

from chatkeep import QuotaExceeded, Ref
from chatkeep.aio import AsyncChatkeep, AsyncReservation
from support.postgres import with_driver

ORG = Ref("organization", 1)


@pytest.mark.sync_api
def test_async_reservations(db_url: str) -> None:
    url = with_driver(db_url, "asyncpg") if db_url.startswith("postgresql") else db_url

    async def run() -> None:
        async with AsyncChatkeep(url) as keep:
            await keep.quotas.set(ORG, tokens=100, window="7d")
            held = await keep.quotas.reserve(ORG, 30)
            assert isinstance(held, AsyncReservation) and held.id is not None
            assert await held.settle(12) is True and held.done
            with pytest.raises(RuntimeError):
                async with await keep.quotas.reserve(ORG, 50):
                    raise RuntimeError("connection refused")  # released
            async with await keep.quotas.reserve(ORG, 20):
                pass  # never settled: counted as reserved
            quota = await keep.quotas.get(ORG)
            assert quota is not None and (quota.spent, quota.reserved) == (32, 0)
            with pytest.raises(QuotaExceeded):
                await keep.quotas.reserve(ORG, 69)
            assert await keep.quotas.remaining(ORG) == 68
            assert [q.tokens for q in await keep.quotas.list()] == [100]
            assert await keep.quotas.sweep() == 0
            assert await keep.quotas.clear(ORG) is True

    asyncio.run(run())
