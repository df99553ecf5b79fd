"""Which driver the async API runs a URL on, and how a PostgreSQL URL's libpq ``options``
reach asyncpg (which has no ``options``): one URL must serve both APIs."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from chatkeep import StoreError
from chatkeep.aio import AsyncChatkeep
from chatkeep.aio.engine import async_url, make_async_engine, server_settings


@pytest.mark.parametrize(("url", "driver"), [
    ("sqlite:///x.db", "sqlite+aiosqlite"),
    ("sqlite+pysqlite:///x.db", "sqlite+aiosqlite"),
    ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite"),
    ("postgresql://app@db/chat", "postgresql+asyncpg"),
    ("postgresql+psycopg2://app@db/chat", "postgresql+asyncpg"),
    ("postgresql+asyncpg://app@db/chat", "postgresql+asyncpg"),
    ("postgresql+psycopg://app@db/chat", "postgresql+psycopg"),
    # SQLAlchemy's own spelling of psycopg's async connection, and the hosts' alias
    ("postgresql+psycopg_async://app@db/chat", "postgresql+psycopg"),
    ("postgres://app@db/chat", "postgresql+asyncpg"),
    ("postgres+psycopg://app@db/chat", "postgresql+psycopg"),
])
def test_each_url_gets_the_async_driver_it_names_or_the_default(url: str, driver: str) -> None:
    assert async_url(url).drivername == driver


@pytest.mark.parametrize(("options", "settings"), [
    ("-csearch_path=tenant_7", {"search_path": "tenant_7"}),
    ("-c search_path=a,b -cstatement_timeout=5s",
     {"search_path": "a,b", "statement_timeout": "5s"}),
    ("--search_path=x -c work_mem=8MB", {"search_path": "x", "work_mem": "8MB"}),
    ("", {}),
    (r"-c application_name=chat\ keep", {"application_name": "chat keep"}),
])
def test_libpq_settings_become_server_settings(options: str, settings: dict[str, str]) -> None:
    assert server_settings(options) == settings


@pytest.mark.parametrize("options", ["-c", "-csearch_path", "-c =x", "search_path=x",
                                     "-d 3", "--=x"])
def test_options_asyncpg_cannot_take_are_a_store_error(options: str) -> None:
    with pytest.raises(StoreError, match="-c name=value"):
        server_settings(options)
    with pytest.raises(StoreError, match="-c name=value"):
        make_async_engine(f"postgresql://app@127.0.0.1/chat?options={options}")


def test_a_missing_asyncpg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # as if not installed
    with pytest.raises(StoreError, match=r"asyncpg.*chatkeep\[aio\]"):
        AsyncChatkeep("postgresql://app@127.0.0.1/chat")


@pytest.mark.postgres
def test_the_url_settings_reach_both_async_drivers_and_explicit_ones_win(
        pg_schema_url: str) -> None:
    """The scratch schema's URL carries ``options=-csearch_path=...``: chatkeep's tables
    land in that schema on asyncpg as on psycopg; a setting also given in ``connect_args``
    keeps the explicit value."""
    from support.postgres import with_driver

    async def schema_of_tables(url: str) -> str:
        async with AsyncChatkeep(url, dispatcher="inline") as keep, \
                keep.engine.connect() as conn:
            found = await conn.exec_driver_sql(
                "SELECT table_schema FROM information_schema.tables "
                "WHERE table_name = 'chat_sessions' AND table_schema = current_schema()")
            return str(found.scalar_one())

    async def settings(url: str, **kwargs: Any) -> tuple[str, ...]:
        engine = make_async_engine(url, **kwargs)
        try:
            async with engine.connect() as conn:
                found = await conn.exec_driver_sql(
                    "SELECT current_schema(), current_setting('work_mem'), "
                    "current_setting('lock_timeout')")
                return tuple(str(v) for v in found.one())
        finally:
            await engine.dispose()

    schema = pg_schema_url.rsplit("%3D", 1)[1]
    for driver in ("asyncpg", "psycopg"):
        assert asyncio.run(schema_of_tables(with_driver(pg_schema_url, driver))) == schema
    url = f"{pg_schema_url}%20-cwork_mem%3D8MB%20-c%20lock_timeout%3D4s"
    for driver in ("asyncpg", "psycopg"):
        assert asyncio.run(settings(with_driver(url, driver))) == (schema, "8MB", "4s")
    explicit = {"server_settings": {"work_mem": "16MB"}}
    assert asyncio.run(settings(with_driver(url, "asyncpg"), connect_args=explicit)) == (
        schema, "16MB", "4s")
    assert explicit == {"server_settings": {"work_mem": "16MB"}}  # not written into


@pytest.mark.postgres
def test_a_psycopg_async_url_runs_on_psycopg_and_postgres_urls_work_on_both_apis(
        pg_schema_url: str) -> None:
    """``postgresql+psycopg_async://`` used to run quietly on asyncpg; ``postgres://``
    (a host's ``DATABASE_URL``) was refused as an unknown backend."""
    from chatkeep import Chatkeep, Ref
    from support.postgres import with_driver

    async def driver_of(url: str) -> str:
        async with AsyncChatkeep(url, dispatcher="inline") as keep:
            session = await keep.sessions.create(Ref("org", 1))
            await session.add_user("hello")
            return str(keep.engine.dialect.driver)

    psycopg_url = with_driver(pg_schema_url, "psycopg")
    assert asyncio.run(driver_of(psycopg_url.replace("+psycopg://", "+psycopg_async://"))) \
        == "psycopg"
    alias = psycopg_url.replace("postgresql+psycopg://", "postgres://")
    assert asyncio.run(driver_of(alias)) == "asyncpg"
    with Chatkeep(alias, dispatcher="inline") as keep:
        assert keep.sessions.list(Ref("org", 1))[0].message_count == 1
