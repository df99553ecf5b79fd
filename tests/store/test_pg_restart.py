"""A PostgreSQL restart, as the pool sees it: every pooled connection's backend is gone at
once (issue 22, item 8). The first call after it may fail; no other call does, and reads
do not fail at all (they retry once on a fresh connection)."""

from __future__ import annotations

import threading

import psycopg
import pytest
from pg_workers import pg_dsn

from chatkeep import Chatkeep, Ref, StoreError

pytestmark = pytest.mark.postgres

ORG = Ref("organization", 1)
APP = "chatkeep-restart-test"


def with_app_name(url: str) -> str:
    return url + ("&" if "?" in url else "?") + f"application_name={APP}"


def warm_pool(keep: Chatkeep, session_id: str, connections: int = 5) -> None:
    """Hold ``connections`` pooled connections at once, so the pool keeps that many."""
    barrier = threading.Barrier(connections)

    def read() -> None:
        with keep.repository.reading() as conn:
            barrier.wait(10)
            conn.exec_driver_sql("SELECT 1")
        keep.sessions.get_unscoped(session_id).messages  # noqa: B018

    threads = [threading.Thread(target=read) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def restart(url: str) -> int:
    """Terminate every backend of this test's keep (what a server restart does to it)."""
    with psycopg.connect(pg_dsn(url), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()", (APP,)).fetchall()
    return len(rows)


@pytest.mark.parametrize("calls", ["appends", "reads"])
def test_after_a_restart_at_most_one_call_fails(pg_url: str, calls: str) -> None:
    url = with_app_name(pg_url)
    keep = Chatkeep(url)
    try:
        session = keep.sessions.create(ORG)
        session.add_user("before the restart")
        warm_pool(keep, session.id)
        assert restart(url) >= 2
        failures = 0
        for i in range(6):
            try:
                if calls == "appends":
                    session.add_user(f"after the restart {i}")
                else:
                    assert keep.sessions.get(session.id, ORG).messages
            except StoreError:
                failures += 1
        assert failures <= (1 if calls == "appends" else 0), failures
    finally:
        keep.close()


def test_an_unclassified_error_inside_a_connection_block_discards_the_connection(
        pg_url: str) -> None:
    """A connection that saw an error nobody classified (here: our own bug mid-block) is
    not handed to the next caller: it may be mid-protocol."""
    keep = Chatkeep(with_app_name(pg_url))
    try:
        keep.sessions.create(ORG)
        with pytest.raises(RuntimeError), keep.repository.reading() as conn:
            pid = conn.connection.driver_connection.info.backend_pid
            raise RuntimeError("a bug inside the block")
        with keep.repository.reading() as conn:
            assert conn.connection.driver_connection.info.backend_pid != pid
    finally:
        keep.close()




@pytest.mark.parametrize("driver", ["asyncpg", "psycopg_async"])
def test_after_a_restart_at_most_one_async_call_fails(pg_url: str, driver: str) -> None:
    """The same on the async API, whose pools live per event loop (asyncpg, and psycopg's
    async connection); an asyncpg client-side error is a ``StoreError`` too."""
    import asyncio
    from datetime import UTC, datetime

    from chatkeep.aio import AsyncChatkeep
    from support.postgres import with_driver

    url = with_driver(pg_url, driver)
    started = datetime.now(UTC)

    def restart_since() -> int:
        with psycopg.connect(pg_dsn(pg_url), autocommit=True) as admin:
            return len(admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE backend_start >= %s AND pid <> pg_backend_pid() "
                "AND datname = current_database() AND backend_type = 'client backend'",
                (started,)).fetchall())

    async def main() -> tuple[int, int]:
        async with AsyncChatkeep(url) as keep:
            session = await keep.sessions.create(ORG)
            await session.add_user("before the restart")
            # Hold several pooled connections at once.
            await asyncio.gather(*(keep.sessions.get(session.id, ORG) for _ in range(5)))
            assert await asyncio.to_thread(restart_since) >= 1
            read_failures = write_failures = 0
            for i in range(6):
                try:
                    await keep.sessions.get(session.id, ORG)
                except StoreError:
                    read_failures += 1
                try:
                    await session.add_user(f"after the restart {i}")
                except StoreError:
                    write_failures += 1
            return read_failures, write_failures

    reads, writes = asyncio.run(main())
    assert reads == 0 and writes <= 1, (reads, writes)
