"""Behind PgBouncer in transaction pooling mode (issue 22): with ``prepared_statements=false``
every driver (asyncpg, psycopg's async and sync connections) appends concurrently and
builds the history; without it, each fails on a statement prepared on another server
connection (``prepared statement "__asyncpg_stmt_N__" does not exist``).

PgBouncer (127.0.0.1:6432) is started by ``scripts/services.sh``; without it these tests
skip with the reason (fail under ``CHATKEEP_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.errors import StoreError
from chatkeep.messages import Message, Usage

pytestmark = [pytest.mark.postgres]

ORG = Ref("organization", 22)
SYSTEM = "You are a careful assistant."
TASKS = 4
MESSAGES = 50
CONFIG = {"chat": {"max_history_tokens": 1200, "recent_messages_min": 4,
                   "summary_max_tokens": 200}}
"""A budget the 50 messages overflow: the history build also folds (a compare-and-set in a
transaction of its own, through the bouncer)."""
DRIVERS = {"asyncpg": "postgresql+asyncpg", "psycopg_async": "postgresql+psycopg",
           "psycopg": "postgresql+psycopg"}
"""The drivers under test: the async API's two, and the sync API's."""


def shares(total: int = MESSAGES, tasks: int = TASKS) -> list[int]:
    """``total`` messages split over ``tasks`` (13, 13, 12, 12)."""
    return [total // tasks + (1 if t < total % tasks else 0) for t in range(tasks)]


def text(task: int, i: int) -> str:
    return f"t{task}-{i} " + "words " * 30


def on_driver(url: str, driver: str) -> str:
    return DRIVERS[driver] + url[url.index("://"):]


async def async_turns(url: str, config: dict[str, Any]) -> tuple[list[Message], list[Any]]:
    """Four tasks on one ``AsyncChatkeep`` append 50 messages to one session at once (the
    odd ones billed assistant replies), then the history is built."""
    async with AsyncChatkeep(url, config=config, dispatcher="inline") as keep:
        session = await keep.sessions.create(tenant=ORG)

        async def task(t: int, count: int) -> None:
            for i in range(count):
                if i % 2:
                    await session.add_assistant(text(t, i), usage=Usage(3, 2), model="m")
                else:
                    await session.add_user(text(t, i))

        await asyncio.gather(*(task(t, n) for t, n in enumerate(shares())))
        history = await keep.compressor.build_history(session, SYSTEM)
        again = await keep.sessions.get(session.id, tenant=ORG)
        return await again.read_messages(), list(history)


def sync_turns(url: str, config: dict[str, Any]) -> tuple[list[Message], list[Any]]:
    """The same on the sync API: four threads on one ``Chatkeep``."""
    keep = Chatkeep(url, config=config, dispatcher="inline")
    try:
        session = keep.sessions.create(tenant=ORG)
        errors: list[BaseException] = []

        def task(t: int, count: int) -> None:
            try:
                mine = keep.sessions.get(session.id, tenant=ORG)
                for i in range(count):
                    if i % 2:
                        mine.add_assistant(text(t, i), usage=Usage(3, 2), model="m")
                    else:
                        mine.add_user(text(t, i))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=task, args=(t, n)) for t, n in enumerate(shares())]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        if errors:
            raise errors[0]
        history = keep.compressor.build_history(keep.sessions.get_unscoped(session.id), SYSTEM)
        return keep.sessions.get(session.id, tenant=ORG).messages, list(history)
    finally:
        keep.close()


def turns(url: str, driver: str, config: dict[str, Any] | None = None,
          ) -> tuple[list[Message], list[Any]]:
    url = on_driver(url, driver)
    merged = {**CONFIG, **(config or {})}
    if driver == "psycopg":
        return sync_turns(url, merged)
    return asyncio.run(async_turns(url, merged))


def check(messages: Sequence[Message], history: Sequence[Any]) -> None:
    """Every message once, seqs gapless, each task's in its own order; the history ends
    with the newest message."""
    assert [m.seq for m in messages] == list(range(1, MESSAGES + 1))
    by_task = {t: [m.content for m in messages if (m.content or "").startswith(f"t{t}-")]
               for t in range(TASKS)}
    assert by_task == {t: [text(t, i) for i in range(n)] for t, n in enumerate(shares())}
    assert history[0]["role"] == "system"
    assert history[-1]["content"] == messages[-1].content


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_concurrent_turns_through_pgbouncer_in_transaction_mode(
        pgbouncer_schema_url: str, driver: str) -> None:
    """The URL carries ``?prepared_statements=false`` (tests/conftest.py)."""
    assert "prepared_statements=false" in pgbouncer_schema_url
    check(*turns(pgbouncer_schema_url, driver))


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_the_config_key_does_the_same(pgbouncer_schema_url: str, driver: str) -> None:
    url = pgbouncer_schema_url.replace("?prepared_statements=false", "")
    check(*turns(url, driver, {"store": {"prepared_statements": False}}))


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_without_the_setting_prepared_statements_break(
        pgbouncer_schema_url: str, driver: str) -> None:
    """Why the setting exists: with prepared statements (the default) the same turns fail
    through the bouncer (asyncpg at its first statements, psycopg once it prepares a
    statement run five times)."""
    url = pgbouncer_schema_url.replace("?prepared_statements=false", "")
    with pytest.raises(StoreError, match="prepared statement") as raised:
        for _ in range(3):  # whichever server connection each statement gets
            turns(url, driver)
    # chatkeep's own words say what to set, not only the driver's
    assert "prepared_statements=false" in str(raised.value)


def test_the_url_parameter_wins_over_the_config_key(
        pgbouncer_schema_url: str) -> None:
    url = pgbouncer_schema_url  # ...?prepared_statements=false
    check(*turns(url, "asyncpg", {"store": {"prepared_statements": True}}))



PREPARED = "SELECT count(*) FROM pg_prepared_statements"
"""Statements prepared by name on the server, in this session."""


def prepared_after_turns(url: str, driver: str) -> int:
    """Named statements left on the one server connection a keep used for 20 turns (on the
    server directly: no bouncer needed to see what a driver prepares)."""
    url = on_driver(url, driver)
    if driver == "psycopg":
        keep = Chatkeep(url, dispatcher="inline")
        try:
            session = keep.sessions.create(tenant=ORG)
            for i in range(20):
                session.add_user(f"u{i}")
                keep.compressor.build_history(keep.sessions.get_unscoped(session.id), SYSTEM)
            with keep.engine.connect() as conn:
                return int(conn.exec_driver_sql(PREPARED).scalar_one())
        finally:
            keep.close()

    async def run() -> int:
        async with AsyncChatkeep(url, dispatcher="inline") as keep:
            session = await keep.sessions.create(tenant=ORG)
            for i in range(20):
                await session.add_user(f"u{i}")
                await keep.compressor.build_history(session, SYSTEM)
            async with keep.engine.connect() as conn:
                return int((await conn.exec_driver_sql(PREPARED)).scalar_one())

    return asyncio.run(run())


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_no_driver_prepares_a_statement_on_the_server(pg_schema_url: str,
                                                      driver: str) -> None:
    """Directly on the server: with the setting, nothing stays prepared on the session
    (what a bouncer would hand to another client); without it, the drivers prepare."""
    assert prepared_after_turns(pg_schema_url + "&prepared_statements=false", driver) == 0
    assert prepared_after_turns(pg_schema_url, driver) > 0
