"""A pytest plugin for the OpenAI Agents SDK's own session tests: its sessions are chatkeep's.

Loaded into the SDK's test run (``pytest -p agents_sdk_shim``, from
``test_agents_conformance.py``), before any of its test modules is imported. Each store
the SDK's tests construct becomes a :class:`ChatkeepSession` over a fresh
``AsyncChatkeep`` on SQLite, with the test's ``session_id`` as the conversation's key
(``keep.sessions.open``) and one tenant:

* ``SQLiteSession(session_id, db_path)``: the keep on that file (a fresh file for the
  default ``":memory:"``, which is one database per session object);
* ``SQLAlchemySession(session_id, engine=...)`` / ``.from_url(session_id, url=...)``: the
  keep on the engine's SQLite file (a fresh file per in-memory engine or URL); its
  ``engine`` is the caller's engine on that file, or a plain one (what the SDK's tests
  run their own SQL on and dispose of);
* ``SimpleListSession(session_id, history)`` (the SDK's in-memory test session): a fresh
  keep holding ``history``.

``CHATKEEP_SDK_DESELECT`` (JSON ``[[file, test function, reason], ...]``) names the tests
that inspect another store's internals; they are deselected and reported.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import openai
import pytest

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession

TENANT = Ref("organization", "agents-sdk-conformance")
_SCRATCH = Path(tempfile.mkdtemp(prefix="chatkeep-agents-sdk-"))
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
_CLOSING: set[asyncio.Task[None]] = set()
_MEMORY_ENGINES: weakref.WeakKeyDictionary[Any, Path] = weakref.WeakKeyDictionary()


def _scratch_file() -> Path:
    """A fresh database file: what the SDK opens as ``:memory:`` is new per object."""
    handle, name = tempfile.mkstemp(suffix=".db", dir=_SCRATCH)
    os.close(handle)
    return Path(name)


def _keep(path: str | os.PathLike[str]) -> AsyncChatkeep:
    """A keep on the SQLite file ``path``; its model (the summarizer's) is never reached in
    these tests: it points nowhere, so nothing leaves this machine."""
    model = openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1",
                               max_retries=0)
    return AsyncChatkeep(f"sqlite:///{Path(path).resolve()}", model=model)


def _sqlite_path(url: Any) -> Path:
    """The file an SQLAlchemy SQLite URL names (a fresh one for an in-memory database)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(str(url))
    if not parsed.drivername.startswith("sqlite"):
        raise NotImplementedError(f"the shim maps SQLite URLs only, not {parsed.drivername}")
    database = parsed.database or ":memory:"
    return _scratch_file() if database == ":memory:" else Path(database)


class _ShimSession(ChatkeepSession):
    """A ChatkeepSession on a fresh keep over ``path``, which closes its keep when the SDK's
    test closes the session."""

    def __init__(self, session_id: str, path: Path, session_settings: Any = None) -> None:
        super().__init__(_keep(path), session_id, tenant=TENANT,
                         session_settings=session_settings)

    def close(self) -> None:
        """Close the keep: on the running loop if there is one (the SDK's ``close`` is
        synchronous), else on a loop of its own."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            task = loop.create_task(self.keep.close())
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)
            return
        # Opened on a loop that is gone, the keep's connections went with it.
        with contextlib.suppress(Exception):
            asyncio.run(self.keep.close())


class SQLiteSession(_ShimSession):
    """``agents.SQLiteSession``'s constructor over chatkeep."""

    def __init__(self, session_id: str, db_path: str | os.PathLike[str] = ":memory:",
                 sessions_table: str = "agent_sessions",
                 messages_table: str = "agent_messages",
                 session_settings: Any = None) -> None:
        path = _scratch_file() if str(db_path) == ":memory:" else Path(db_path)
        super().__init__(session_id, path, session_settings)
        self.db_path = db_path


class SQLAlchemySession(_ShimSession):
    """``agents.extensions.memory.SQLAlchemySession``'s constructors over chatkeep."""

    def __init__(self, session_id: str, *, engine: Any, create_tables: bool = False,
                 sessions_table: str = "agent_sessions",
                 messages_table: str = "agent_messages",
                 session_settings: Any = None, ensure_ascii: bool = True) -> None:
        path = engine if isinstance(engine, Path) else _MEMORY_ENGINES.get(engine)
        if path is None:
            path = _sqlite_path(engine.url.render_as_string(hide_password=False))
            if (engine.url.database or ":memory:") == ":memory:":
                _MEMORY_ENGINES[engine] = path  # one in-memory database per engine
        super().__init__(session_id, path, session_settings)
        self._path = path
        on_file = not isinstance(engine, Path) and path not in _MEMORY_ENGINES.values()
        self._engine: Any = engine if on_file else None

    @classmethod
    def from_url(cls, session_id: str, *, url: str, engine_kwargs: dict[str, Any] | None = None,
                 session_settings: Any = None, **kwargs: Any) -> SQLAlchemySession:
        # (A path stands in for the engine the SDK's from_url would create.)
        return cls(session_id, engine=_sqlite_path(url), session_settings=session_settings)

    @property
    def engine(self) -> Any:
        """An ``AsyncEngine`` on the session's database, for what the SDK's tests do with
        theirs through SQL of their own (chatkeep's engine begins its own transactions)."""
        if self._engine is None:
            from sqlalchemy.ext.asyncio import create_async_engine

            self._engine = create_async_engine(f"sqlite+aiosqlite:///{self._path}")
        return self._engine


class SimpleListSession(_ShimSession):
    """The SDK's in-memory test session (``tests/utils/simple_session.py``) over chatkeep:
    a fresh keep, ``history`` stored before the first call."""

    def __init__(self, session_id: str = "test", history: list[Any] | None = None) -> None:
        super().__init__(session_id, _scratch_file())
        self._history = list(history or [])

    async def _seed(self) -> None:
        if self._history:
            history, self._history = self._history, []
            await super().add_items(history)

    async def get_items(self, limit: int | None = None, wrapper: Any = None) -> list[Any]:
        await self._seed()
        return await super().get_items(limit, wrapper)

    async def add_items(self, items: list[Any], wrapper: Any = None) -> None:
        await self._seed()
        await super().add_items(items, wrapper)

    async def pop_item(self, wrapper: Any = None) -> Any:
        await self._seed()
        return await super().pop_item(wrapper)

    async def clear_session(self, wrapper: Any = None) -> None:
        await self._seed()
        await super().clear_session(wrapper)


def _substitute() -> None:
    """Put the shim classes where the SDK's tests import the SDK's sessions from."""
    places: list[tuple[str, str, type]] = [
        ("agents", "SQLiteSession", SQLiteSession),
        ("agents.memory", "SQLiteSession", SQLiteSession),
        ("agents.extensions.memory.sqlalchemy_session", "SQLAlchemySession", SQLAlchemySession),
        ("agents.extensions.memory", "SQLAlchemySession", SQLAlchemySession),
    ]
    importlib.import_module("agents.memory.sqlite_session")  # loaded before it is replaced
    for module, name, shim in places:
        _place(module, name, shim)


def _place(module: str, name: str, shim: type) -> None:
    """``module.name = shim`` (nothing when the module is not there: an SDK without that
    store, whose tests then fail to import)."""
    with contextlib.suppress(ImportError):
        setattr(importlib.import_module(module), name, shim)


_substitute()


def pytest_configure(config: pytest.Config) -> None:
    """The SDK's test helpers are importable once its test tree is the root: swap its
    in-memory test session too."""
    _place("tests.utils.simple_session", "SimpleListSession", SimpleListSession)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests listed in ``CHATKEEP_SDK_DESELECT`` (by file and function)."""
    listed = json.loads(os.environ.get("CHATKEEP_SDK_DESELECT", "[]"))
    names = {(file, function) for file, function, _reason in listed}
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        function = getattr(item, "originalname", None) or item.name
        (dropped if (item.nodeid.split("::")[0], function) in names else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
