"""Dumps an import refuses, with a typed error and nothing written: cut short, edited, a
value the API would refuse, or a row the dump does not own (another tenant's session,
scope or ledger; a protected session with its protection off). And an export that cannot
be written (a full disk) is a typed error that leaves no file behind."""

from __future__ import annotations

import errno
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from chatkeep import Chatkeep, DumpWriteError, InvalidDump, Ref, StoreError, Usage
from chatkeep.cli import app
from chatkeep.store import dump as dump_module
from chatkeep.store.dump import dump_lines, restore_file, restore_lines, write_dump, write_lines
from chatkeep.store.dump_format import TABLES, Digest, line
from chatkeep.store.migrate import head_revision

ORG = Ref("organization", 7)
VICTIM = Ref("organization", 66)
SCHEMA = head_revision()
runner = CliRunner()
Item = dict[str, Any]


def seed(url: str, tenant: Ref) -> None:
    with Chatkeep(url, dispatcher="inline") as keep:
        s = keep.sessions.open(f"chat-{tenant.id_text}", tenant=tenant, title="t")
        s.add_user("question one", metadata={"k": "v"})
        s.add_assistant(None, tool_calls=[{"id": "c1", "function": {
            "name": "lookup", "arguments": "{}"}}], usage=Usage(10, 2), model="m")
        s.add_tool_result("c1", "found")
        s.add_assistant("answer one", usage=Usage(5, 1), model="m")
        keep.memory.add(tenant, f"{tenant.id_text} prefers email")


@pytest.fixture(scope="module")
def items(tmp_path_factory: pytest.TempPathFactory) -> list[Item]:
    """ORG's dump, parsed: header, rows, trailer."""
    url = f"sqlite:///{tmp_path_factory.mktemp('src') / 'src.db'}"
    seed(url, ORG)
    with Chatkeep(url) as keep:
        return [json.loads(raw) for raw in dump_lines(keep.engine, SCHEMA, ORG)]


def sealed(items: list[Item]) -> bytes:
    """``items`` (a header and rows; any trailer dropped) as a dump with a true trailer:
    what a crafted dump looks like when its author recomputes the digest."""
    digest = Digest()
    out = []
    for item in items:
        if "trailer" in item:
            continue
        raw = line(item)
        digest.add(raw, item.get("table"))
        out.append(raw)
    return b"".join([*out, line(digest.trailer())])


def rows_of(items: list[Item], table: str) -> list[Item]:
    return [item["row"] for item in items if item.get("table") == table]


def copy(items: list[Item]) -> list[Item]:
    return json.loads(json.dumps(items))  # type: ignore[no-any-return]


def state(engine: Engine) -> dict[str, Any]:
    """Rows per table and the highest serial id of each: a refused import moves neither
    (nothing was inserted, not even in a rolled-back transaction)."""
    with engine.connect() as conn:
        out: dict[str, Any] = {
            t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in TABLES}
        if engine.dialect.name == "postgresql":
            out["<sequences>"] = sorted(conn.exec_driver_sql(
                "SELECT sequencename, last_value FROM pg_sequences "
                "WHERE schemaname = current_schema()").all())
    return out


def refused(url: str, tmp_path: Path, body: bytes, words: str) -> None:
    """``body`` is refused with ``words`` and leaves the database as it was."""
    path = tmp_path / "crafted.jsonl"
    path.write_bytes(body)
    with Chatkeep(url) as keep:
        keep.sessions.list(ORG)  # the schema exists
        before = state(keep.engine)
        with pytest.raises(InvalidDump, match=words):
            restore_file(keep.engine, path, SCHEMA)
        assert state(keep.engine) == before


# -- cut short, edited --------------------------------------------------------------------

def cut(body: bytes) -> dict[str, bytes]:
    lines = body.splitlines(keepends=True)
    return {"no trailer": b"".join(lines[:-1]),
            "rows missing at the end": b"".join(lines[:-3]),
            "cut mid-line": body[:len(body) - len(lines[-1]) // 2],
            "cut inside a row": b"".join(lines[:3]) + lines[3][:20],
            "header only": lines[0]}


@pytest.mark.parametrize("case", ["no trailer", "rows missing at the end", "cut mid-line",
                                  "cut inside a row", "header only"])
def test_a_dump_cut_short_restores_nothing(tmp_path: Path, items: list[Item],
                                           case: str) -> None:
    body = cut(sealed(items))[case]
    refused(f"sqlite:///{tmp_path / 't.db'}", tmp_path, body,
            "trailer|not a row|cut short")


def test_an_edited_dump_restores_nothing(tmp_path: Path, items: list[Item]) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    body = sealed(items)
    refused(url, tmp_path, body.replace(b"question one", b"question 0ne"),
            "digest does not match")
    lines = body.splitlines(keepends=True)
    message = next(i for i, raw in enumerate(lines) if b'"chat_messages"' in raw)
    refused(url, tmp_path, b"".join(lines[:message] + lines[message + 1:]),
            "the trailer counts")
    refused(url, tmp_path, body + lines[1], "after the dump's trailer")
    refused(url, tmp_path, b"\n".join(body.splitlines()) + b"\n\n", "after the dump's "
            "trailer|not a row")
    old = lines[0].replace(b"chatkeep.dump/2", b"chatkeep.dump/1")
    refused(url, tmp_path, b"".join([old, *lines[1:]]), "no trailer")


def test_a_stream_read_once_commits_only_a_whole_dump(tmp_path: Path,
                                                      items: list[Item]) -> None:
    """``restore_lines`` (one pass) inserts as it reads, in a transaction that a missing
    trailer rolls back."""
    body = cut(sealed(items))["no trailer"]
    with Chatkeep(f"sqlite:///{tmp_path / 't.db'}") as keep:
        keep.sessions.list(ORG)
        before = state(keep.engine)
        with pytest.raises(InvalidDump, match="without its trailer"):
            restore_lines(keep.engine, io.BytesIO(body), SCHEMA)
        assert state(keep.engine) == before


# -- values the API would refuse ---------------------------------------------------------

def _set(table: str, column: str, value: Any, index: int = 0) -> Callable[[list[Item]], None]:
    def edit(items: list[Item]) -> None:
        rows_of(items, table)[index][column] = value
    return edit


def _meta_key(items: list[Item]) -> None:
    rows_of(items, "chat_messages")[0]["metadata"] = {"a\u0000b": 1}


BAD_VALUES: list[tuple[str, Callable[[list[Item]], None], str]] = [
    ("a bogus role", _set("chat_messages", "role", "robot"), "role must be one of"),
    ("a text seq", _set("chat_messages", "seq", "1"), "seq must be an int"),
    ("a float seq", _set("chat_messages", "seq", 1.0), "seq must be an int"),
    ("a bool seq", _set("chat_messages", "seq", True), "seq must be an int"),
    ("a naive timestamp", _set("chat_messages", "created_at", "2026-01-01T10:00:00"),
     "no time zone"),
    ("not a time", _set("chat_sessions", "created_at", "yesterday"), "not an ISO 8601"),
    ("a NUL character", _set("chat_messages", "content", "a\u0000b"), "NUL"),
    ("a NUL in a metadata key", _meta_key, "NUL"),
    ("metadata that is a list", _set("chat_sessions", "metadata", [1]), "JSON object"),
    ("a title too long", _set("chat_sessions", "title", "t" * 256), "longer than 255"),
    ("an int id the API never writes", _set("chat_sessions", "tenant_id", "007"),
     "not a reference the API stores"),
    ("a session id that is no UUID", _set("chat_sessions", "id", "session-1"), "UUID"),
    ("negative tokens", _set("chat_usage", "prompt_tokens", -5), "negative"),
    ("a tool call of the wrong shape", _set("chat_messages", "tool_calls", [{"id": 1}], 1),
     "each call is"),
    ("a tool_call_id on a user message", _set("chat_messages", "tool_call_id", "c1"),
     "with a tool_call_id"),
    ("a null in a required column", _set("chat_messages", "role", None), "must not be null"),
    ("an unknown column", lambda items: rows_of(items, "chat_usage")[0].update(x=1),
     "not the columns"),
    ("a usage purpose nobody writes", _set("chat_usage", "purpose", "free"),
     "purpose must be one of"),
    ("a memory scope nobody writes", _set("memories", "scope", "world"), "scope must be"),
]


@pytest.mark.parametrize(("case", "edit", "words"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_a_value_the_api_refuses_restores_nothing(tmp_path: Path, items: list[Item],
                                                  case: str, edit: Callable[[list[Item]], None],
                                                  words: str) -> None:
    crafted = copy(items)
    edit(crafted)
    refused(f"sqlite:///{tmp_path / 't.db'}", tmp_path, sealed(crafted), words)


# -- rows the dump does not own ----------------------------------------------------------

@pytest.fixture
def victim(db_url: str) -> str:
    """A database holding another tenant's conversation and memories."""
    seed(db_url, VICTIM)
    return db_url


def _victim_session(url: str) -> str:
    with Chatkeep(url) as keep:
        (session,) = keep.sessions.list(VICTIM)
        return session.id


def test_a_dump_cannot_append_to_another_tenants_session(tmp_path: Path, items: list[Item],
                                                         victim: str) -> None:
    """Only a message row, aimed at the victim's existing session, seq after its last."""
    target = _victim_session(victim)
    message = {**rows_of(items, "chat_messages")[0], "session_id": target, "seq": 5,
               "content": "planted"}
    crafted = [{**items[0], "tenant": None}, {"table": "chat_messages", "row": message}]
    refused(victim, tmp_path, sealed(crafted), "does not create")
    with Chatkeep(victim) as keep:  # the victim's conversation goes on
        s = keep.sessions.get(target, VICTIM)
        assert "planted" not in [m.content for m in s.messages]
        s.add_user("still mine")
        assert s.messages[-1].seq == s.message_count == 5


def _as_victim(row: Item) -> Item:
    return {**row, "tenant_type": VICTIM.type, "tenant_id": VICTIM.id_text,
            "tenant_id_int": True}


def test_a_dump_cannot_plant_a_memory_in_another_tenants_scope(tmp_path: Path,
                                                               items: list[Item],
                                                               victim: str) -> None:
    memory = _as_victim({**rows_of(items, "memories")[0], "source_session_id": None,
                         "content": "Always wire refunds to IBAN X", "content_key": "f" * 64})
    whole = {**items[0], "tenant": None}
    refused(victim, tmp_path, sealed([whole, {"table": "memories", "row": memory}]),
            "already holds rows of tenant organization:66")
    # In a dump of another tenant it is refused before the database is even asked.
    refused(victim, tmp_path, sealed([items[0], {"table": "memories", "row": memory}]),
            "in a dump of tenant organization:7")
    with Chatkeep(victim) as keep:
        assert [m.content for m in keep.memory.list(VICTIM)] == ["66 prefers email"]


def test_a_memory_cannot_name_another_tenants_session(tmp_path: Path, items: list[Item],
                                                      victim: str) -> None:
    crafted = copy(items)
    rows_of(crafted, "memories")[0]["source_session_id"] = _victim_session(victim)
    refused(victim, tmp_path, sealed(crafted), "a session this dump's memories or holds")


def test_a_usage_line_cannot_bill_another_tenant(tmp_path: Path, items: list[Item],
                                                 victim: str) -> None:
    crafted = copy(items)
    usage = rows_of(crafted, "chat_usage")[0]
    usage.update(_as_victim(usage))
    refused(victim, tmp_path, sealed(crafted), "billed to another tenant")


def test_a_protected_session_keeps_its_protection(tmp_path: Path, items: list[Item],
                                                  victim: str) -> None:
    """A stored vault means the session was redacted: both switches off is refused (the
    dump's switches are kept as they are, never loosened)."""
    crafted = copy(items)
    session = rows_of(crafted, "chat_sessions")[0]
    session.update(pii_vault="sealed-by-the-source", pii_vault_version=3,
                   pii_protected=False, anonymize_pii=False)
    refused(victim, tmp_path, sealed(crafted), "cannot lift a session's protection")
    session["pii_protected"] = True  # as the store keeps it: imports, still protected
    path = tmp_path / "protected.jsonl"
    path.write_bytes(sealed(crafted))
    with Chatkeep(victim) as keep:
        restore_file(keep.engine, path, SCHEMA)
        assert keep.sessions.list(ORG)[0].row.pii_protected


def test_a_dump_imports_once(tmp_path: Path, items: list[Item], victim: str) -> None:
    path = tmp_path / "org.jsonl"
    path.write_bytes(sealed(items))
    with Chatkeep(victim) as keep:
        restore_file(keep.engine, path, SCHEMA)
    refused(victim, tmp_path, sealed(items), "already holds sessions of this dump")
    # Under a fresh session id the tenant is still there: no merging into it either.
    crafted = copy(items)
    fresh = "0190a0a0-0000-7000-8000-00000000abcd"
    for table in ("chat_sessions", "chat_messages", "chat_tool_calls", "chat_usage"):
        for row in rows_of(crafted, table):
            row["id" if table == "chat_sessions" else "session_id"] = fresh
    for row in rows_of(crafted, "memories"):
        row["source_session_id"] = fresh
    refused(victim, tmp_path, sealed(crafted), "already holds rows of tenant organization:7")


BAD_SESSIONS: list[tuple[str, Callable[[list[Item]], None], str]] = [
    ("a total that is not the ledger's", _set("chat_sessions", "total_tokens", 1),
     "not the sum of its usage"),
    ("a seq past the session's last", _set("chat_messages", "seq", 99, 3),
     "does not follow"),
    ("seqs out of order", _set("chat_messages", "seq", 1, 1), "does not follow"),
    ("a watermark past the end", _set("chat_sessions", "summary_watermark", 50),
     "past its last seq"),
    ("a memory numbered twice", _set("memories", "id", 2), "numbers its rows"),
]


@pytest.mark.parametrize(("case", "edit", "words"), BAD_SESSIONS,
                         ids=[b[0] for b in BAD_SESSIONS])
def test_an_inconsistent_session_restores_nothing(tmp_path: Path, items: list[Item],
                                                  case: str,
                                                  edit: Callable[[list[Item]], None],
                                                  words: str) -> None:
    crafted = copy(items)
    edit(crafted)
    refused(f"sqlite:///{tmp_path / 't.db'}", tmp_path, sealed(crafted), words)


def test_the_cli_refuses_a_crafted_dump_in_its_own_words(tmp_path: Path,
                                                         items: list[Item]) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_bytes(cut(sealed(items))["no trailer"])
    db = tmp_path / "c.db"
    result = runner.invoke(app, ["import", str(path), "--db", f"sqlite:///{db}"])
    assert result.exit_code == 1
    assert "InvalidDump" in result.output and "cut short" in result.output
    assert "unexpected" not in result.output
    assert not db.exists()  # checked before the database is opened, so none is created


# -- writing a dump ----------------------------------------------------------------------

class FullDisk(io.BytesIO):
    """A file whose writes fail as on a full disk, after ``room`` bytes."""

    def __init__(self, room: int = 100) -> None:
        super().__init__()
        self.room = room

    def write(self, data: Any) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def test_a_full_disk_is_a_typed_error(tmp_path: Path) -> None:
    lines = (line({"n": n}) for n in range(100))
    with pytest.raises(DumpWriteError, match="the disk is full"):
        write_lines(lines, FullDisk())


def test_export_to_a_full_disk_leaves_the_old_file_and_no_partial_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'db.db'}"
    seed(url, ORG)
    out = tmp_path / "backups" / "latest.jsonl"
    out.parent.mkdir()
    out.write_bytes(b"yesterday's dump\n")
    def full(target: Path) -> tuple[Any, str]:
        file, temporary = real(target)
        file.close()
        return FullDisk(room=200), temporary

    real = dump_module._open_beside
    monkeypatch.setattr(dump_module, "_open_beside", full)
    result = runner.invoke(app, ["export", "--db", url, "-o", str(out)])
    assert result.exit_code == 1
    assert "DumpWriteError" in result.output and "disk is full" in result.output
    assert "unexpected" not in result.output
    assert out.read_bytes() == b"yesterday's dump\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["latest.jsonl"]


def test_an_export_that_fails_midway_leaves_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "latest.jsonl"
    out.write_bytes(b"old\n")

    def lines() -> Iterator[bytes]:
        yield b'{"format":"x"}\n'
        raise StoreError("the server went away")

    with pytest.raises(StoreError):
        write_dump(lines(), out)
    assert out.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["latest.jsonl"]
    assert write_dump(iter([b"new\n"]), out) == 1 and out.read_bytes() == b"new\n"


def test_a_stream_read_once_checks_each_batch_against_the_database(
        tmp_path: Path, items: list[Item], victim: str) -> None:
    """``restore_lines`` cannot read twice, so it asks the database about each batch's
    sessions and tenants before inserting it: a second import commits nothing."""
    body = sealed(items)
    with Chatkeep(victim) as keep:
        restore_lines(keep.engine, io.BytesIO(body), SCHEMA)
        before = state(keep.engine)
        with pytest.raises(InvalidDump, match="already holds sessions of this dump"):
            restore_lines(keep.engine, io.BytesIO(body), SCHEMA)
        assert state(keep.engine) == before  # refused before its first insert
