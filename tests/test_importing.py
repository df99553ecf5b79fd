"""``chatkeep import``: one file is one transaction; every refusal names the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from chatkeep import Chatkeep, InvalidMessage, Ref, StoreError
from chatkeep.cli import app
from chatkeep.importing import import_file, read_jsonl
from support.seeded import ORG, dump, seed

pytestmark = pytest.mark.sync_api  # dumps tables and installs triggers below the API

runner = CliRunner()
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
GOOD = [
    {"role": "user", "content": "Find clause 4"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Clause 4 text"},
    {"role": "assistant", "content": "Clause 4 covers termination."},
]


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines),
                    encoding="utf-8")
    return path


# (case, the lines, the line refused, words the error must hold)
BAD: list[tuple[str, list[Any], int, str]] = [
    ("assistant with null content and no calls",
     [GOOD[0], {"role": "assistant", "content": None}], 2, "text or tool calls"),
    ("empty content", [GOOD[0], {"role": "user", "content": ""}], 2, "non-empty"),
    ("image-only content", [GOOD[0], {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}], 2, "image_url"),
    ("reused tool-call id", [*GOOD, {"role": "assistant", "tool_calls": [CALL]}], 5,
     "already used on line 2"),
    ("answered twice", [*GOOD[:3], {"role": "tool", "tool_call_id": "call_1",
                                    "content": "again"}], 4, "already answered on line 3"),
    ("result without a call", [GOOD[0], {"role": "tool", "tool_call_id": "nope",
                                         "content": "x"}], 2, "answers no earlier call"),
    ("name that is an object", [{"role": "user", "content": "hi", "name": {"a": 1}}], 1,
     "name must be a string"),
    ("NUL byte", [GOOD[0], {"role": "user", "content": "a\u0000b"}], 2, "NUL"),
    ("name over its column", [{"role": "user", "content": "hi", "name": "n" * 256}], 1,
     "longer than 255"),
    ("call id over its column", [{"role": "assistant", "tool_calls": [
        {**CALL, "id": "c" * 256}]}], 1, "longer than 255"),
    ("unknown role", [{"role": "robot", "content": "beep"}], 1, "unknown role"),
    ("not an object", [GOOD[0], ["user", "hi"]], 2, "JSON object"),
]


@pytest.mark.parametrize(("case", "lines", "line", "words"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_line_is_named_and_nothing_is_written(keep: Chatkeep, tmp_path: Path, case: str,
                                                    lines: list[Any], line: int,
                                                    words: str) -> None:
    seed(keep)
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    before = dump(keep.engine)
    with pytest.raises(InvalidMessage) as refused:
        import_file(keep, path, Ref("organization", 9))
    assert f"{path}, line {line}:" in str(refused.value)
    assert words in str(refused.value)
    assert dump(keep.engine) == before


@pytest.mark.parametrize(("content", "words"), [
    (b"", "no messages"), (b"\n  \n\n", "no messages"),
    (b'{"role": "user", "content": "hi"}\n{"role": "user", "con', "line 2: not valid JSON"),
    (b'{"role": "user", "content": "hi"}\n{"role": "user", "content": "caf\xe9"}\n',
     "line 2: not UTF-8"),
])
def test_empty_broken_and_non_utf8_files_are_refused(tmp_path: Path, content: bytes,
                                                     words: str) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(content)
    with pytest.raises(InvalidMessage, match=words):
        read_jsonl(path)


def test_line_separators_inside_json_strings_do_not_split_lines(tmp_path: Path,
                                                                keep: Chatkeep) -> None:
    text_with_separators = "one\u2028two\u2029three\x85four\x0cfive"
    path = tmp_path / "ok.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(
        {"role": "user", "content": text_with_separators}, ensure_ascii=False) + "\r\n"
        + json.dumps({"role": "assistant", "content": "ok"}) + "\r\n").encode("utf-8"))
    session = import_file(keep, path, ORG)
    assert [m.content for m in session.messages] == [text_with_separators, "ok"]
    assert session.title == "ok.jsonl" and session.message_count == 2


def test_the_session_and_its_messages_are_one_transaction(keep: Chatkeep,
                                                          tmp_path: Path) -> None:
    """A failure inside the database, after the session row and some messages were
    written in the transaction, leaves neither behind."""
    seed(keep)
    with keep.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(text("CREATE TRIGGER boom BEFORE INSERT ON chat_usage "
                              "BEGIN SELECT RAISE(ABORT, 'boom'); END"))
        else:
            conn.execute(text("CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS "
                              "$$ BEGIN RAISE EXCEPTION 'boom'; END $$"))
            conn.execute(text("CREATE TRIGGER boom BEFORE INSERT ON chat_usage "
                              "FOR EACH ROW EXECUTE FUNCTION boom()"))
    before = dump(keep.engine, sequences=False)  # a rolled-back insert moves a sequence
    from chatkeep import MessageDraft, Role, Usage
    from chatkeep.importing import ImportedMessage, import_messages

    messages = [ImportedMessage(1, MessageDraft(Role.USER, "hi")),
                ImportedMessage(2, MessageDraft(Role.ASSISTANT, "hello", usage=Usage(1, 1)))]
    with pytest.raises(StoreError, match="boom"):
        import_messages(keep, messages, Ref("organization", 9))
    assert dump(keep.engine, sequences=False) == before


def test_cli_import_of_a_bad_file_names_the_line_and_creates_no_database(
        tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD[0], {"role": "assistant",
                                                          "content": None}])
    db = tmp_path / "never.db"
    result = runner.invoke(app, ["import", str(path), "--tenant", "organization:7",
                                 "--db", f"sqlite:///{db}"])
    assert result.exit_code == 1
    assert f"{path}, line 2" in result.output and "Traceback" not in result.output
    assert not db.exists()


def test_cli_import_writes_everything(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "good.jsonl", GOOD)
    url = f"sqlite:///{tmp_path / 'c.db'}"
    result = runner.invoke(app, ["import", str(path), "--tenant", "organization:7",
                                 "--title", "Clause 4", "--db", url])
    assert result.exit_code == 0, result.output
    assert "imported 4 messages" in result.output
    with Chatkeep(url, dispatcher="inline") as keep:
        (session,) = keep.sessions.list(Ref("organization", 7))
        assert session.title == "Clause 4"
        assert [m.role.value for m in session.messages] == ["user", "assistant", "tool",
                                                             "assistant"]
