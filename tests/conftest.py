"""Shared fixtures: every store-backed test runs on SQLite and on PostgreSQL.

PostgreSQL tests use the server on 127.0.0.1 (``CHATKEEP_TEST_PG_URL`` overrides
the URL) in a fresh schema per test; where no server answers they are skipped
with the reason, never silently passed. Tests marked ``pgbouncer`` also run through
PgBouncer in transaction pooling mode (127.0.0.1:6432, ``scripts/services.sh``) with
``?prepared_statements=false``. CI sets ``CHATKEEP_REQUIRE_SERVICES=1``, which turns
such a skip into a failure.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import aiosqlite
import openai
import pytest

from chatkeep import Chatkeep
from chatkeep.testing import FakeOpenAIServer
from support.aio import API_AXIS, open_on_axis
from support.postgres import PG_URL, scratch_schema, with_driver

REQUIRE_SERVICES = os.environ.get("CHATKEEP_REQUIRE_SERVICES") == "1"
"""No driver named: each API picks its own (psycopg, asyncpg; ``open_on_axis``)."""
_pg_error: str | bool | None = False  # False = not probed yet


def postgres_unavailable() -> str | None:
    """``None`` when PostgreSQL answers, else why not (probed once per run)."""
    global _pg_error
    if _pg_error is False:
        try:
            import psycopg

            dsn = with_driver(PG_URL, None)
            with psycopg.connect(dsn, connect_timeout=3) as conn:
                conn.execute("select 1")
            _pg_error = None
        except Exception as exc:  # driver missing or server down: both mean skip
            _pg_error = f"PostgreSQL not reachable at {PG_URL}: {type(exc).__name__}: {exc}"
    return _pg_error if isinstance(_pg_error, str) else None


PGBOUNCER_URL = os.environ.get("CHATKEEP_TEST_PGBOUNCER_URL", "postgresql://postgres@127.0.0.1:6432")
"""PgBouncer in transaction pooling mode in front of the test server (``scripts/services.sh``
starts it), without a database name: its databases ``ck_pgb_0`` .. ``ck_pgb_31`` are
the test database with ``search_path`` set to the schema of that name (PgBouncer 1.18
passes no ``search_path`` from the client, so a schema per test is a slot)."""
PGBOUNCER_SLOTS = 32
_SLOT_LOCKS = 0x636B7062
"""The advisory-lock class (with the slot number) a test holds on its slot: pytest runs
in other processes take the other slots."""
_pgbouncer_error: str | bool | None = False


def pgbouncer_unavailable() -> str | None:
    """``None`` when PgBouncer serves the slot databases, else why not (probed once)."""
    global _pgbouncer_error
    if _pgbouncer_error is False:
        try:
            import psycopg

            with psycopg.connect(f"{PGBOUNCER_URL}/ck_pgb_0", connect_timeout=3,
                                 prepare_threshold=None, autocommit=True) as conn:
                row = conn.execute("SHOW search_path").fetchone()
            _pgbouncer_error = None if row and row[0] == "ck_pgb_0" else (
                f"PgBouncer at {PGBOUNCER_URL} is not the one scripts/services.sh starts: "
                f"database ck_pgb_0 has search_path {row[0] if row else None!r}")
        except Exception as exc:
            _pgbouncer_error = (f"PgBouncer not reachable at {PGBOUNCER_URL}: "
                                f"{type(exc).__name__}: {' '.join(str(exc).split())} "
                                "(scripts/services.sh starts it)")
    return _pgbouncer_error if isinstance(_pgbouncer_error, str) else None


def pgbouncer_admin(command: str) -> None:
    """One command on PgBouncer's admin console (``RECONNECT ck_pgb_3``)."""
    import psycopg

    with psycopg.connect(f"{PGBOUNCER_URL}/pgbouncer", autocommit=True,
                         connect_timeout=3) as conn:
        conn.execute(command)


@contextmanager
def pgbouncer_slot(timeout: float = 300) -> Iterator[str]:
    """A URL through PgBouncer (``?prepared_statements=false``) whose ``search_path`` is a
    fresh, empty schema: a free slot, held by an advisory lock on a direct connection for
    the block. The schema is created and dropped through PgBouncer (so in the database it
    serves), and the slot's server connections are closed afterwards, so nothing a test
    left on them reaches the next test of the slot."""
    import psycopg

    def through(schema: str, *statements: str) -> None:
        """``statements`` in one transaction (a session-level SET would stay behind on
        whichever server connection it ran on)."""
        with psycopg.connect(f"{PGBOUNCER_URL}/{schema}", autocommit=True,
                             prepare_threshold=None) as conn, conn.transaction():
            for statement in statements:
                conn.execute(statement)

    with psycopg.connect(with_driver(PG_URL, None), autocommit=True) as holder:
        deadline = time.monotonic() + timeout
        while True:
            slot = next((n for n in range(PGBOUNCER_SLOTS) if holder.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", (_SLOT_LOCKS, n)).fetchone() == (True,)),
                None)
            if slot is not None:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"no free PgBouncer slot in {timeout:.0f}s (all "
                            f"{PGBOUNCER_SLOTS} held)")
            time.sleep(0.2)
        schema = f"ck_pgb_{slot}"
        through(schema, "SET LOCAL lock_timeout = '30s'",
                f"DROP SCHEMA IF EXISTS {schema} CASCADE", f"CREATE SCHEMA {schema}")
        try:
            yield f"{PGBOUNCER_URL}/{schema}?prepared_statements=false"
        finally:
            pgbouncer_admin(f"RECONNECT {schema}")
            through(schema, "SET LOCAL lock_timeout = '30s'",
                    f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def skip_or_fail(reason: str) -> None:
    """Skip with the reason on a laptop; fail in CI, where the service must be there."""
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} (CHATKEEP_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


def port_answers(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port``."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def require_service() -> Callable[[str, int], None]:
    """``require_service("Redis", 6379)``: skip (or, in CI, fail) when it does not answer."""
    def check(name: str, port: int) -> None:
        if not port_answers(port):
            skip_or_fail(f"{name} not reachable on 127.0.0.1:{port}")
    return check


_pgvector_missing: dict[str, str | None] = {}


def libpq_dsn(url: str) -> str:
    """A test database URL as libpq takes it: no driver, and without chatkeep's own
    ``prepared_statements`` parameter (the PgBouncer URLs carry it)."""
    dsn = with_driver(url, None)
    for param in ("?prepared_statements=false&", "&prepared_statements=false"):
        dsn = dsn.replace(param, "?" if param.startswith("?") else "")
    return dsn.removesuffix("?prepared_statements=false")


def pgvector_missing(url: str) -> str | None:
    """``None`` when the PostgreSQL database at ``url`` has pgvector, or chatkeep can install
    it there (recall by meaning needs it), else why not; probed once per database, by a
    ``CREATE EXTENSION`` that is rolled back."""
    database = with_driver(url, None).partition("?")[0]
    if database not in _pgvector_missing:
        import psycopg

        reason = None
        with psycopg.connect(libpq_dsn(url), connect_timeout=3, prepare_threshold=None) as conn:
            if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() \
                    is None:
                try:
                    conn.execute("CREATE EXTENSION vector WITH SCHEMA public")
                except psycopg.Error as exc:
                    reason = (f"pgvector is not usable on {database}: "
                              f"{str(exc).splitlines()[0]}")
                finally:
                    conn.rollback()
        _pgvector_missing[database] = reason
    return _pgvector_missing[database]


@pytest.fixture
def pgvector(db_url: str) -> str | None:
    """``None`` when ``db_url`` can store vectors (SQLite always can), else why not."""
    return pgvector_missing(db_url) if db_url.startswith("postgresql") else None


@pytest.fixture
def requires_pgvector(pgvector: str | None) -> None:
    """For tests of recall by meaning: skip with the reason on a PostgreSQL without pgvector
    (in CI, with ``CHATKEEP_REQUIRE_SERVICES=1``, fail: the extension must be there)."""
    if pgvector is not None:
        skip_or_fail(pgvector)


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A URL whose search_path is a fresh, empty schema (dropped afterwards)."""
    reason = postgres_unavailable()
    if reason:
        skip_or_fail(reason)
    with scratch_schema(PG_URL) as url:
        yield url


@pytest.fixture
def pgbouncer_schema_url() -> Iterator[str]:
    """A URL through PgBouncer in transaction mode, ``?prepared_statements=false``, whose
    search_path is a fresh, empty schema (skips/fails without PostgreSQL or PgBouncer)."""
    reason = postgres_unavailable() or pgbouncer_unavailable()
    if reason:
        skip_or_fail(reason)
    with pgbouncer_slot() as url:
        yield url


BACKENDS = ("sqlite", "postgresql", "pgbouncer")
"""``pgbouncer`` (PostgreSQL through PgBouncer in transaction mode) only for tests marked
``pgbouncer``: the sessions, history and concurrency modules (on every test it would add
minutes to the run)."""


def backends(definition: Any) -> tuple[str, ...]:
    """The backends a test runs on: ``pgbouncer`` only when marked so."""
    if definition.get_closest_marker("pgbouncer") is not None:
        return BACKENDS
    return tuple(b for b in BACKENDS if b != "pgbouncer")


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A fresh database URL on each backend (parametrised in ``pytest_generate_tests``)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'chat.db'}"
    fixture = "pgbouncer_schema_url" if request.param == "pgbouncer" else "pg_schema_url"
    url: str = request.getfixturevalue(fixture)
    return url


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test using ``db_url`` runs on each backend (through PgBouncer too when marked
    ``pgbouncer``). Every test using
    ``make_keep``/``keep`` runs on the sync API and on the async one (through
    ``support.aio.SyncOverAsync``): on its default drivers, and on PostgreSQL
    also on psycopg's async connection; unless marked ``sync_api`` (it reaches below the
    public API: engine events, direct SQL, threads on the core)."""
    names = metafunc.fixturenames
    if "api" in names:
        sync_only = metafunc.definition.get_closest_marker("sync_api") is not None
        apis = ["sync"] if sync_only else list(API_AXIS)
        if "db_url" in names:
            metafunc.parametrize(("db_url", "api"), [
                (backend, api) for backend in backends(metafunc.definition) for api in apis
                if api != "async_psycopg" or backend != "sqlite"], indirect=["db_url"])
        else:
            metafunc.parametrize("api", apis)
    elif "db_url" in names:
        metafunc.parametrize("db_url", backends(metafunc.definition), indirect=True)


@pytest.fixture
def make_keep(db_url: str, api: str) -> Iterator[Callable[..., Chatkeep]]:
    """Factory for ``Chatkeep`` instances on the test database (closed afterwards); on the
    ``async`` axis each is the sync API driven through ``AsyncChatkeep``."""
    made: list[Any] = []

    def factory(**kwargs: Any) -> Chatkeep:
        kwargs.setdefault("dispatcher", "inline")  # deterministic: jobs finish in the call
        keep = open_on_axis(db_url, api, **kwargs)
        made.append(keep)
        return keep  # type: ignore[no-any-return]

    yield factory
    for keep in made:
        keep.close()


@pytest.fixture
def keep(make_keep: Callable[..., Chatkeep]) -> Chatkeep:
    return make_keep()


@pytest.fixture
def llm_server() -> Iterator[FakeOpenAIServer]:
    """The scripted OpenAI-compatible server on 127.0.0.1."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def openai_client(llm_server: FakeOpenAIServer) -> openai.OpenAI:
    """The real SDK pointed at the fake server; no retries so scripts stay in step."""
    return openai.OpenAI(base_url=llm_server.base_url, api_key="test-key", max_retries=0,
                         timeout=2.0)


@pytest.fixture(autouse=True)
def _chatkeep_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="chatkeep")


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The name of each call sent to an aiosqlite connection's thread (what the one-trip
    tests of the async append and the bounded reads count)."""
    sent: list[str] = []
    real: Any = aiosqlite.Connection._execute

    async def counting(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(getattr(fn, "__name__", repr(fn)))
        return await real(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counting)
    yield sent
