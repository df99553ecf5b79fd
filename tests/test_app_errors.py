"""Every bad value is a typed ``ChatkeepError`` naming the field, the same on both backends,
raised before anything is written; every way to open a database wrongly is one too."""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import String

from chatkeep import (
    Chatkeep,
    ChatkeepError,
    ConfigError,
    InvalidArgument,
    InvalidMessage,
    InvalidReference,
    InvalidTokens,
    Ref,
    SessionNotFound,
    StoreError,
    Usage,
)
from chatkeep.config import Config
from chatkeep.store.schema import chat_messages, chat_sessions, chat_tool_calls, chat_usage
from chatkeep.validation import (
    MODEL_MAX,
    NAME_MAX,
    REF_ID_MAX,
    REF_TYPE_MAX,
    SESSION_ID_MAX,
    TITLE_MAX,
    TOOL_CALL_ID_MAX,
    TOOL_NAME_MAX,
    check_metadata,
    text_problem,
)
from support.seeded import ALICE, ORG, dump, seed

pytestmark = pytest.mark.sync_api  # dumps tables below the public API


def test_length_limits_are_the_schemas() -> None:
    def length(column: Any) -> int:
        assert isinstance(column.type, String)
        assert column.type.length is not None
        return column.type.length

    assert length(chat_sessions.c.tenant_type) == REF_TYPE_MAX
    assert length(chat_sessions.c.tenant_id) == REF_ID_MAX
    assert length(chat_sessions.c.title) == TITLE_MAX
    assert length(chat_sessions.c.id) == SESSION_ID_MAX
    assert length(chat_messages.c.name) == NAME_MAX
    assert length(chat_messages.c.tool_call_id) == TOOL_CALL_ID_MAX
    assert length(chat_tool_calls.c.call_id) == TOOL_CALL_ID_MAX
    assert length(chat_tool_calls.c.name) == TOOL_NAME_MAX
    assert length(chat_usage.c.model) == MODEL_MAX


def test_text_problems() -> None:
    assert text_problem("plain") is None
    assert text_problem("ünïcödé ✓ 𝕏") is None
    assert text_problem("a\x00b") == "contains a NUL character"
    assert text_problem("é\x00") == "contains a NUL character"
    problem = text_problem("a\ud83db")
    assert problem is not None and "U+D83D" in problem


@pytest.mark.parametrize("metadata", [
    {1: "a"}, {None: 1}, {"a": math.nan}, {"a": math.inf}, {"a": {"b": [1, {2: 3}]}},
    {"a": object()}, {"a": b"bytes"}, {"a": {1, 2}}, {"a": 2**64}, {"a\x00": 1},
    {"a": "\udc80"}, 5, "text", [1],
])
def test_metadata_that_would_not_round_trip_is_refused(metadata: Any) -> None:
    with pytest.raises(InvalidArgument, match="metadata"):
        check_metadata(metadata)


def test_metadata_nested_too_deeply_is_refused() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(200):
        node["n"] = {}
        node = node["n"]
    with pytest.raises(InvalidArgument, match="nested deeper"):
        check_metadata(deep)


def test_good_metadata_is_kept() -> None:
    value = {"a": [1, 2.5, None, True, "x"], "b": {"c": -(2**63)}}
    assert check_metadata(value) == value
    assert check_metadata(None) == {}


# (call, error type, a word the message must hold)
CASES: list[tuple[str, Any, type[ChatkeepError], str]] = [
    ("add_tokens(2**70)", lambda k, s: s.add_tokens(2**70), InvalidTokens, "tokens"),
    ("add_tokens(-1)", lambda k, s: s.add_tokens(-1), InvalidTokens, "negative"),
    ("add_tokens(True)", lambda k, s: s.add_tokens(True), InvalidTokens, "int"),
    ("Usage(2**31, 0)", lambda k, s: s.record_usage("chat", Usage(2**31, 0)), InvalidTokens,
     "prompt_tokens"),
    ("record_usage('chat', None)", lambda k, s: s.record_usage("chat", None), InvalidTokens,
     "usage"),
    ("record_usage model", lambda k, s: s.record_usage("chat", Usage(1, 1), 5), InvalidTokens,
     "model"),
    ("title too long", lambda k, s: k.sessions.create(ORG, title="t" * 256), InvalidArgument,
     "title"),
    ("title not text", lambda k, s: k.sessions.create(ORG, title=5), InvalidArgument, "title"),
    ("anonymize_pii=1", lambda k, s: k.sessions.create(ORG, anonymize_pii=1), InvalidArgument,
     "anonymize_pii"),
    ("anonymize_pii setter", lambda k, s: setattr(s, "anonymize_pii", "yes"), InvalidArgument,
     "anonymize_pii"),
    ("metadata key", lambda k, s: k.sessions.create(ORG, metadata={1: "a"}), InvalidArgument,
     "metadata"),
    ("NUL in content", lambda k, s: s.add_user("a\x00b"), InvalidMessage, "NUL"),
    ("surrogate in content", lambda k, s: s.add_user("a\ud800"), InvalidMessage, "surrogate"),
    ("name an object", lambda k, s: s.add_user("hi", name={"first": "A"}), InvalidMessage,
     "name"),
    ("name too long", lambda k, s: s.add_user("hi", name="n" * 256), InvalidMessage, "name"),
    ("model not text", lambda k, s: s.add_assistant("hi", model=4), InvalidMessage, "model"),
    ("model too long", lambda k, s: s.add_assistant("hi", model="m" * 256), InvalidMessage,
     "model"),
    ("message metadata NaN", lambda k, s: s.add_user("hi", metadata={"x": math.nan}),
     InvalidMessage, "metadata"),
    ("tool call id too long", lambda k, s: s.add_assistant(tool_calls=[
        {"id": "c" * 256, "function": {"name": "f"}}]), InvalidMessage, "tool call id"),
    ("tool call name NUL", lambda k, s: s.add_assistant(tool_calls=[
        {"id": "c9", "function": {"name": "f\x00"}}]), InvalidMessage, "name"),
    ("tool call function not an object", lambda k, s: s.add_assistant(tool_calls=[
        {"id": "c9", "function": "f"}]), InvalidMessage, "tool_calls"),
    ("add_tool_result(id, None)", lambda k, s: s.add_tool_result("call-open", None),
     InvalidMessage, "content"),
    ("tool_call_id too long", lambda k, s: s.add_tool_result("c" * 256, "x"), InvalidMessage,
     "tool_call_id"),
    ("reused tool call id", lambda k, s: s.add_assistant(tool_calls=[
        {"id": "call-1", "function": {"name": "f"}}]), InvalidMessage, "already used"),
    ("answered twice", lambda k, s: s.add_tool_result("call-1", "again"), InvalidMessage,
     "already answered"),
    ("rewind(id, -5)", lambda k, s: k.memory.rewind(s.id, -5), InvalidArgument, "through_seq"),
    ("forget whole_tenant='no'", lambda k, s: k.memory.forget(ORG, whole_tenant="no"),
     InvalidArgument, "whole_tenant"),
    ("memory.list(scope='bogus')", lambda k, s: k.memory.list(ORG, scope="bogus"),
     InvalidArgument, "scope"),
    ("memory.list(limit=0)", lambda k, s: k.memory.list(ORG, limit=0), InvalidArgument,
     "limit"),
    ("memory.recall(query=5)", lambda k, s: k.memory.recall(s, query=5), InvalidArgument,
     "query"),
    ("sweep(idle_after=5)", lambda k, s: k.memory.sweep(idle_after=5), InvalidArgument,
     "idle_after"),
    ("sweep(idle_after=-1s)", lambda k, s: k.memory.sweep(idle_after=timedelta(seconds=-1)),
     InvalidArgument, "idle_after"),
    ("sweep(batch_size=0)", lambda k, s: k.memory.sweep(batch_size=0), InvalidArgument,
     "batch_size"),
    ("build_history(s, None)", lambda k, s: k.compressor.build_history(s, None),
     InvalidArgument, "system_prompt"),
    ("sessions.list(limit=-1)", lambda k, s: k.sessions.list(ORG, limit=-1), InvalidArgument,
     "limit"),
    ("sessions.get_unscoped(5)", lambda k, s: k.sessions.get_unscoped(5), InvalidArgument,
     "session id"),
    ("sessions.get NUL", lambda k, s: k.sessions.get_unscoped("ab\x00"), InvalidArgument, "NUL"),
    ("sessions.get unknown", lambda k, s: k.sessions.get_unscoped("nope"), SessionNotFound, "nope"),
    ("Ref huge int", lambda k, s: k.sessions.list(Ref("o", 10**5000)), InvalidReference,
     "255"),
    ("Ref NUL", lambda k, s: k.sessions.list(Ref("o", "a\x00")), InvalidReference, "NUL"),
    ("usage since a string", lambda k, s: k.usage(ORG, since="2026-11"), InvalidArgument,
     "since"),
    ("privacy.restore(None)", lambda k, s: k.privacy.restore(None, "x"), InvalidArgument,
     "ChatSession"),
    ("privacy.restore_stored(None)", lambda k, s: k.privacy.restore_stored(None, "x"),
     InvalidArgument, "ChatSession"),
    ("privacy.vault(None)", lambda k, s: k.privacy.vault(None), InvalidArgument,
     "ChatSession"),
    ("privacy.scrub(None)", lambda k, s: k.privacy.scrub(None, {"a": "b"}), InvalidArgument,
     "ChatSession"),
]


@pytest.mark.parametrize(("what", "call", "error", "word"), CASES, ids=[c[0] for c in CASES])
def test_bad_values_are_typed_errors_naming_the_field_and_write_nothing(
        keep: Chatkeep, what: str, call: Any, error: type[ChatkeepError], word: str) -> None:
    session = seed(keep)
    before = dump(keep.engine)
    with pytest.raises(error, match=word):
        call(keep, session)
    assert dump(keep.engine) == before


def test_forget_with_a_real_bool_still_works(keep: Chatkeep) -> None:
    seed(keep)
    assert keep.memory.forget(ORG, ALICE) == 1
    assert keep.memory.forget(ORG, whole_tenant=True) == 1


# -- opening a database ----------------------------------------------------------------------

@pytest.mark.parametrize(("url", "kwargs", "error", "word"), [
    ("sqlite:///{tmp}/x.db", {"dispatcher": "bogus"}, ConfigError, "dispatcher"),
    ("mysql://app@127.0.0.1/chat", {}, StoreError, "SQLite and PostgreSQL"),
    ("mysql+pymysql://app@127.0.0.1/chat", {}, StoreError, "SQLite and PostgreSQL"),
    ("nosuch://x/y", {}, StoreError, "nosuch"),
    ("not a url at all", {}, StoreError, "not a database URL"),
    ("sqlite:///{tmp}/missing/folder/x.db", {}, StoreError, "does not exist"),
    ("sqlite:///{tmp}/afile/x.db", {}, StoreError, "does not exist"),
    ("sqlite:///{tmp}", {}, StoreError, "cannot open"),
    ("postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2", {}, StoreError,
     "cannot open"),
    ("postgresql+nosuchdriver://postgres@127.0.0.1/test", {}, StoreError, "nosuchdriver"),
    ("sqlite+aiosqlite:///{tmp}/x.db", {}, StoreError, "async"),
    ("sqlite:///{tmp}/x.db", {"create_schema": "yes"}, ConfigError, "create_schema"),
    ("sqlite:///{tmp}/x.db", {"counter": 5}, ConfigError, "counter"),
    ("sqlite:///{tmp}/x.db", {"config": {"store": {"sqlite_synchronous": "fast"}}},
     ConfigError, "sqlite_synchronous"),
    ("sqlite:///{tmp}/x.db", {"model": object()}, ConfigError, "ChatModel"),
    ("sqlite:///{tmp}/x.db", {"recognizers": "emails"}, ConfigError, "recognizers"),
])
def test_every_way_to_open_wrongly_is_a_chatkeep_error(
        tmp_path: Path, url: str, kwargs: dict[str, Any], error: type[ChatkeepError],
        word: str) -> None:
    (tmp_path / "afile").write_text("not a folder")
    with pytest.raises(error, match=word):  # at construction, or when it opens the store
        Chatkeep(url.format(tmp=tmp_path), **kwargs).start()


def test_construction_opens_nothing_until_first_use(tmp_path: Path) -> None:
    """Building a keep wires its parts; the file appears (and the schema is made) on first
    use or on start(), and a server that is down fails there, not in the constructor."""
    path = tmp_path / "lazy.db"
    keep = Chatkeep(f"sqlite:///{path}")
    assert not path.exists() and keep.engine.pool.checkedin() == 0
    keep.sessions.create(ORG)
    assert path.exists()
    down = Chatkeep("postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2")
    with pytest.raises(StoreError, match="cannot open"):
        down.start()
    with pytest.raises(StoreError, match="cannot open"):  # still pending: tried again
        down.sessions.create(ORG)


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import chatkeep.store.engine as engine_module

    def no_driver(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'psycopg'", name="psycopg")

    monkeypatch.setattr(engine_module, "create_engine", no_driver)
    with pytest.raises(StoreError, match=r'psycopg.*chatkeep\[postgres\]'):
        Chatkeep("postgresql://app@127.0.0.1/chat")


@pytest.mark.parametrize("kwargs", [{"dispatcher": "bogus"}, {"model": object()},
                                    {"config": {"chat": {"max_history_tokens": -1}}},
                                    {"create_schema": 1}])
def test_a_refused_open_leaves_no_database_file(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Chatkeep(f"sqlite:///{tmp_path / 'x.db'}", **kwargs)
    assert not (tmp_path / "x.db").exists()


# -- durability and transaction modes on SQLite ---------------------------------------------

def _synchronous(keep: Chatkeep) -> int:
    with keep.engine.connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar_one())


def test_sqlite_is_fully_synchronous_by_default_and_configurable(tmp_path: Path) -> None:
    with Chatkeep(f"sqlite:///{tmp_path / 'a.db'}", dispatcher="inline") as keep:
        assert _synchronous(keep) == 2  # FULL
    with Chatkeep(f"sqlite:///{tmp_path / 'b.db'}", dispatcher="inline",
                  config={"store": {"sqlite_synchronous": "normal"}}) as keep:
        assert _synchronous(keep) == 1
    config = Config.from_env({"CHATKEEP_STORE__SQLITE_SYNCHRONOUS": "EXTRA"})
    assert config.store.sqlite_synchronous == "EXTRA"


def test_reads_do_not_wait_for_a_writer(tmp_path: Path) -> None:
    """Reads begin deferred (a WAL snapshot): a writer holding the lock does not block
    them. (Were they ``BEGIN IMMEDIATE``, this read would wait out the busy timeout.)"""
    path = tmp_path / "c.db"
    with Chatkeep(f"sqlite:///{path}", dispatcher="inline") as keep:
        session = keep.sessions.create(ORG)
        session.add_user("hello")
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE chat_sessions SET title = 'held'")
        done: list[float] = []

        def read() -> None:
            start = time.monotonic()
            keep.sessions.get_unscoped(session.id).messages  # noqa: B018 - the read under test
            done.append(time.monotonic() - start)

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(timeout=5)
        writer.execute("ROLLBACK")
        writer.close()
        reader.join()
        assert done and done[0] < 5


def test_a_model_answering_with_a_non_json_body_is_a_chatkeep_error(tmp_path: Path) -> None:
    import http.server

    import openai

    class Html(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"<html>a proxy's error page</html>")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1",
                               api_key="x", max_retries=0, timeout=5)
        with Chatkeep(f"sqlite:///{tmp_path / 'm.db'}", model=client,
                      dispatcher="inline") as keep:
            session = keep.sessions.create(ORG, ALICE)
            session.add_user("I work at ACME.")
            session.add_assistant("Noted.")
            with pytest.raises(ChatkeepError):
                keep.memory.distil(session)
    finally:
        server.shutdown()
