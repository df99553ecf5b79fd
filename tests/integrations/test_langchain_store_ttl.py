"""ChatkeepStore's time to live, as LangGraph's own stores have it (issue 36 item 7):
``put(..., ttl=minutes)`` and ``TTLConfig`` (``default_ttl``, ``refresh_on_read``); reads
with ``refresh_ttl`` push the expiry on; an expired item is never served; the sweep is
chatkeep's retention sweep (bytes gone: the row and its text index entry). SQLite and
PostgreSQL, sync and async."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from chatkeep import Chatkeep, InvalidArgument, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.langchain import ChatkeepStore
from chatkeep.store import make_engine
from chatkeep.store.schema import memories

ORG = Ref("organization", 1)
NS = ("organization:1", "actor", "user:7")


def expiry(db_url: str, key: str) -> datetime | None:
    engine = make_engine(db_url)
    with engine.connect() as conn:
        value = conn.execute(sa.select(memories.c.expires_at).where(
            memories.c.id == int(key))).scalar_one()
    engine.dispose()
    return None if value is None else value.replace(tzinfo=value.tzinfo or UTC)


def move_expiry(db_url: str, key: str, seconds: float) -> None:
    """Make the item expire ``seconds`` from now (negative: it has expired)."""
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.update(memories).where(memories.c.id == int(key)).values(
            expires_at=datetime.now(UTC) + timedelta(seconds=seconds)))
    engine.dispose()


def about(value: datetime | None, minutes: float) -> bool:
    return value is not None and \
        abs(value - datetime.now(UTC) - timedelta(minutes=minutes)) < timedelta(seconds=30)


def key_of(store: ChatkeepStore, content: str) -> str:
    return next(i.key for i in store.search(NS) if i.value["content"] == content)


@pytest.mark.pgbouncer
def test_put_sets_the_expiry_and_reads_refresh_it(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep, ttl={"default_ttl": 60})
        store.put(NS, "a", {"content": "zqttl default"})
        store.put(NS, "b", {"content": "zqbravo own"}, ttl=5)
        store.put(NS, "c", {"content": "zqttl never"}, ttl=None)
        a, b, c = (key_of(store, t) for t in ("zqttl default", "zqbravo own", "zqttl never"))
        assert about(expiry(db_url, a), 60) and about(expiry(db_url, b), 5)
        assert expiry(db_url, c) is None
        move_expiry(db_url, b, 30)
        assert store.get(NS, b, refresh_ttl=False) is not None
        assert about(expiry(db_url, b), 0.5)  # not refreshed
        assert store.get(NS, b) is not None  # refresh_on_read: default True
        assert about(expiry(db_url, b), 5)
        move_expiry(db_url, b, 30)
        assert [i.key for i in store.search(NS, query="zqbravo")] == [b]
        assert about(expiry(db_url, b), 5)
        move_expiry(db_url, b, 30)
        store.search(NS, query="zqbravo", refresh_ttl=False)
        assert about(expiry(db_url, b), 0.5)
        # A put replaces the item and its expiry, as in LangGraph's stores.
        store.put(NS, c, {"content": "zqttl never, now with one"}, ttl=2)
        assert about(expiry(db_url, key_of(store, "zqttl never, now with one")), 2)


def test_refresh_on_read_off_refreshes_only_when_a_read_asks(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep, ttl={"refresh_on_read": False})
        store.put(NS, "a", {"content": "zqttl lazy"}, ttl=10)
        key = key_of(store, "zqttl lazy")
        move_expiry(db_url, key, 30)
        store.get(NS, key)
        store.search(NS)
        assert about(expiry(db_url, key), 0.5)
        store.get(NS, key, refresh_ttl=True)
        assert about(expiry(db_url, key), 10)


@pytest.mark.pgbouncer
def test_an_expired_item_is_never_served_and_the_sweep_deletes_it(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep, tenant=ORG)
        store.put(NS, "a", {"content": "zqttl gone soon"}, ttl=1)
        store.put(NS, "b", {"content": "zqttl stays"})
        gone, stays = key_of(store, "zqttl gone soon"), key_of(store, "zqttl stays")
        other = ("organization:1", "subject", "case:9")
        store.put(other, "c", {"content": "zqttl a case note"}, ttl=1)
        move_expiry(db_url, gone, -1)
        move_expiry(db_url, key_of_ns(store, other), -1)
        assert store.get(NS, gone) is None
        assert [i.key for i in store.search(NS)] == [stays]
        assert [i.key for i in store.search(NS, query="zqttl")] == [stays]
        assert store.list_namespaces() == [NS]  # the case's only memory expired
        session = keep.sessions.create(ORG, Ref("user", 7))
        assert [m.content for m in keep.memory.recall(session, "zqttl")] == ["zqttl stays"]
        assert expiry(db_url, gone) is not None  # still stored until the sweep
        assert store.sweep_ttl() == 2
        assert store.sweep_ttl() == 0
        assert [m.id for m in keep.memory.list(ORG, include_superseded=True)] == [int(stays)]
        if keep.engine.dialect.name == "sqlite":  # the text index forgot it too
            with keep.engine.connect() as conn:
                hits = conn.exec_driver_sql("SELECT count(*) FROM memories_fts WHERE "
                                            "memories_fts MATCH 'soon'").scalar_one()
            assert hits == 0


def key_of_ns(store: ChatkeepStore, namespace: tuple[str, ...]) -> str:
    return store.search(namespace)[0].key


def test_bad_times_to_live_are_refused(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep)
        for ttl in (0, -1, math.nan, math.inf, True, "5", 10**12):
            with pytest.raises(InvalidArgument, match="ttl"):
                store.put(NS, "a", {"content": "x"}, ttl=ttl)  # type: ignore[arg-type]
        for config in ({"default_ttl": 0}, {"refresh_on_read": "yes"}, {"ttl": 5},
                       {"sweep_interval_minutes": 0}, ["default_ttl"]):
            with pytest.raises(InvalidArgument, match="ttl"):
                ChatkeepStore(keep, ttl=config)  # type: ignore[arg-type]
        assert store.search(NS) == []  # nothing was written


def test_async_store_expires_refreshes_and_sweeps(db_url: str) -> None:
    async def scenario() -> None:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepStore(keep, tenant=ORG, ttl={"default_ttl": 5})
            await store.aput(NS, "a", {"content": "zqttl async"})
            (item,) = await store.asearch(NS)
            assert about(expiry(db_url, item.key), 5)
            move_expiry(db_url, item.key, 30)
            assert await store.aget(NS, item.key) is not None
            assert about(expiry(db_url, item.key), 5)
            move_expiry(db_url, item.key, -1)
            assert await store.aget(NS, item.key) is None
            assert await store.asweep_ttl() == 1
            assert await keep.memory.list(ORG, include_superseded=True) == []

    asyncio.run(scenario())
