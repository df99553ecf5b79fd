"""The CLI for scripts and people: no tracebacks, exit 1 (2 for usage), read commands never
create a database, JSON everywhere a table is printed, and help that says everything."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref, __version__
from chatkeep.cli import app
from chatkeep.cli.common import hoist_verbose
from chatkeep.cli.sessions import WireFormatName
from chatkeep.formats import FORMATS
from support.seeded import ORG, seed

runner = CliRunner()
OFFLINE = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "CHATKEEP_DATABASE_URL": "",
           "CHATKEEP_CONFIG": ""}


def run(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Any:
    """Invoke the CLI; whatever happens, there is no traceback and no escaped exception."""
    result = runner.invoke(app, list(args), env={**OFFLINE, **(env or {})}, input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        (args, repr(result.exception))
    assert "Traceback" not in result.output, result.output
    return result


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A SQLite database holding the seeded session."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    with Chatkeep(db, dispatcher="inline") as keep:
        seed(keep)
    return db


def one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("error: "), output
    return lines[0]


# -- read commands never create a database ---------------------------------------------------

READS = [
    ["sessions", "list", "--tenant", "organization:7"],
    ["sessions", "show", "01234567-89ab-7cde-8f01-23456789abcd"],
    ["history", "01234567-89ab-7cde-8f01-23456789abcd"],
    ["usage"],
    ["memories", "list", "--tenant", "organization:7"],
    ["memories", "forget", "--tenant", "organization:7", "--whole-tenant", "--yes"],
    ["sweep"],
    ["db", "current"],
    ["db", "stamp"],
]


@pytest.mark.parametrize("args", READS, ids=[" ".join(a[:2]) for a in READS])
def test_read_commands_never_create_a_database(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "missing.db"
    result = run(*args, "--db", f"sqlite:///{path}", env={"COLUMNS": "60"})
    assert result.exit_code == 1
    line = one_line_error(result.output)
    assert str(path) in line and "no database" in line
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_a_file_without_the_schema_is_not_migrated_by_a_read(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    result = run("sessions", "list", "--tenant", "organization:7", "--db", f"sqlite:///{path}")
    assert result.exit_code == 1 and "no chatkeep schema" in result.output
    assert path.read_bytes() == b""


# -- failures are one line, exit 1 -------------------------------------------------------------

@pytest.mark.parametrize(("db", "words"), [
    ("mysql://app@127.0.0.1/chat", "SQLite and PostgreSQL"),
    ("nosuch://x", "nosuch"),
    ("postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2", "127.0.0.1"),
    ("sqlite:///{tmp}/afile/x.db", "afile/x.db"),  # a read: no database; a write: no folder
])
@pytest.mark.parametrize("args", [["usage"], ["import", "{tmp}/ok.jsonl", "--tenant", "o:1"],
                                  ["demo"], ["db", "upgrade"]])
def test_bad_databases_are_one_red_line(tmp_path: Path, db: str, words: str,
                                        args: list[str]) -> None:
    (tmp_path / "afile").write_text("a file, not a folder")
    (tmp_path / "ok.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    result = run(*[a.format(tmp=tmp_path) for a in args], "--db", db.format(tmp=tmp_path),
                 env={"COLUMNS": "300"})
    assert result.exit_code == 1
    assert words in one_line_error(result.output)


# What a command is run on may not be a chatkeep database at all: it says what the file is,
# never "run `chatkeep db upgrade` first" (which would not help).
FILE_COMMANDS = [["usage"], ["sessions", "list", "--tenant", "organization:7"],
                 ["import", "{tmp}/one.jsonl", "--tenant", "o:1"], ["db", "current"],
                 ["db", "upgrade"]]


def _damaged(tmp_path: Path, kind: str) -> Path:
    """A copy of the seeded database (``url``'s), damaged as ``kind`` says."""
    good = (tmp_path / "c.db").read_bytes()
    damaged = tmp_path / f"{kind}.db"
    damaged.write_bytes({"text": b"a text file, not a database\n" * 100,
                         "zeros": b"\0" * 4096,
                         "truncated": good[:len(good) // 3],
                         "header-only": good[:100]}[kind])
    return damaged


@pytest.mark.parametrize(("kind", "words"), [
    ("text", "is not a SQLite database"), ("zeros", "is not a SQLite database"),
    ("truncated", "truncated or corrupt"), ("header-only", "truncated or corrupt"),
    ("folder", "is a folder, not a database file"),
])
def test_a_file_that_is_no_database_is_called_what_it_is(tmp_path: Path, url: str,
                                                         kind: str, words: str) -> None:
    (tmp_path / "one.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    if kind == "folder":
        path = tmp_path / "folder.db"
        path.mkdir()
    else:
        path = _damaged(tmp_path, kind)
    before = path.read_bytes() if path.is_file() else b""
    reads = FILE_COMMANDS[:2]  # a write on a damaged file: SQLite's own words will do
    for args in FILE_COMMANDS if kind in ("text", "zeros", "folder") else reads:
        result = run(*[a.format(tmp=tmp_path) for a in args], "--db", f"sqlite:///{path}",
                     env={"COLUMNS": "300"})
        assert result.exit_code == 1, (args, result.output)
        line = one_line_error(result.output)
        assert words in line and str(path) in line, (args, line)
        assert "db upgrade" not in line, (args, line)
    assert (path.read_bytes() if path.is_file() else b"") == before


@pytest.fixture
def read_only_db(tmp_path: Path) -> Iterator[Path]:
    """A chatkeep database in a folder nothing can be written to: made read-only by its
    mode for a user, by a read-only mount for root (whom modes do not stop); skipped where
    neither can be had."""
    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = False
    if os.geteuid() == 0:
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"running as root and cannot mount a read-only folder: {made.stderr}")
        mounted = True
    path = folder / "c.db"
    try:
        with Chatkeep(f"sqlite:///{path}", dispatcher="inline") as keep:
            seed(keep)
        if mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        else:
            folder.chmod(0o555)
            path.chmod(0o444)
        yield path
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=False)
        else:
            folder.chmod(0o755)


def test_a_database_where_nothing_can_be_written_is_called_read_only(
        read_only_db: Path, tmp_path: Path) -> None:
    (tmp_path / "one.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    for args in FILE_COMMANDS:
        result = run(*[a.format(tmp=tmp_path) for a in args], "--db",
                     f"sqlite:///{read_only_db}", env={"COLUMNS": "300"})
        assert result.exit_code == 1, (args, result.output)
        line = one_line_error(result.output)
        assert "read-only" in line and str(read_only_db) in line, (args, line)
        assert "db upgrade" not in line, (args, line)
    new = read_only_db.parent / "new.db"
    result = run("db", "upgrade", "--db", f"sqlite:///{new}", env={"COLUMNS": "300"})
    assert result.exit_code == 1 and "read-only" in one_line_error(result.output)


def test_a_folder_this_user_may_not_write_is_called_read_only(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mode-based case (a user's, which root's fixture above cannot play)."""
    from chatkeep.cli import common

    monkeypatch.setattr(common.os, "access", lambda path, mode: mode != os.W_OK)
    line = one_line_error(run("usage", "--db", url, env={"COLUMNS": "300"}).output)
    assert "is read-only for this user" in line and "db upgrade" not in line
    new = tmp_path / "new.db"
    assert common.sqlite_file_problem(new) == \
        f"cannot create {new}: {tmp_path} is read-only for this user"


def test_an_unexpected_error_is_one_line_too(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from chatkeep.sessions import SessionService

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("something nobody planned for")

    monkeypatch.setattr(SessionService, "list", broken)
    result = run("sessions", "list", "--tenant", "organization:7", "--db", url)
    assert result.exit_code == 1
    line = one_line_error(result.output)
    assert "unexpected RuntimeError: something nobody planned for" in line


@pytest.mark.parametrize(("args", "option"), [
    (["sessions", "list", "--tenant", "o:1", "--limit", "99999999999999999999"], "--limit"),
    (["sessions", "list", "--tenant", "o:1", "--limit", "-3"], "--limit"),
    (["sessions", "list", "--tenant", "org:"], "--tenant"),
    (["sessions", "list", "--tenant", "nocolon"], "--tenant"),
    (["sweep", "--idle-after", "999999999999d"], "--idle-after"),
    (["sweep", "--idle-after", "soon"], "--idle-after"),
    (["usage", "--since", "last week"], "--since"),
    (["usage", "--until", "2026-13"], "--until"),
    (["usage", "--since", "2026-11", "--until", "2026-10"], "--since"),
    (["usage", "--since", "2026-11", "--until", "2026-11"], "--since"),
    (["sessions", "show", "x", "--tail", "-1"], "--tail"),
    (["history", "x", "--format", "openai"], "--format"),
])
def test_usage_errors_exit_2_and_name_the_option(url: str, args: list[str], option: str) -> None:
    result = run(*args, "--db", url, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert option in result.output


def test_a_non_utf8_import_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"role": "user", "content": "café"}\n'.encode("latin-1"))
    result = run("import", str(path), "--tenant", "o:1", "--db", f"sqlite:///{tmp_path}/x.db",
                 env={"COLUMNS": "300"})
    assert result.exit_code == 1
    assert "line 1: not UTF-8" in one_line_error(result.output)


# -- scripting ---------------------------------------------------------------------------------

def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0 and result.output.strip() == f"chatkeep {__version__}"


def test_verbose_is_accepted_after_the_command(url: str) -> None:
    assert run("sessions", "list", "--tenant", "organization:7", "-v", "--db", url
               ).exit_code == 0
    assert run("-v", "sessions", "list", "--tenant", "organization:7", "--db", url
               ).exit_code == 0
    assert hoist_verbose(["sessions", "list", "-v", "--", "-v"]) == \
        ["-v", "sessions", "list", "--", "-v"]
    assert hoist_verbose(["--version"]) == ["--version"]


def test_json_of_every_listing_and_report(url: str) -> None:
    listed = run("sessions", "list", "--tenant", "organization:7", "--json", "--db", url)
    (row,) = json.loads(listed.stdout)
    assert row["tenant"] == {"type": "organization", "id": 7}
    assert row["actor"] == {"type": "user", "id": 3} and row["message_count"] == 3
    shown = json.loads(run("sessions", "show", row["id"], "--json", "--db", url).stdout)
    assert [m["seq"] for m in shown["messages"]] == [1, 2, 3]
    assert shown["billed_tokens"] == 20 and shown["conversation_tokens"] > 0
    assert shown["messages"][1]["tool_calls"][0]["id"] == "call-1"
    usage = json.loads(run("usage", "--tenant", "organization:7", "--since", "2000",
                           "--json", "--db", url).stdout)
    assert usage["total_tokens"] == 20
    assert {(line["purpose"], line["total_tokens"]) for line in usage["lines"]} == \
        {("chat", 15), ("manual", 5)}
    memories = json.loads(run("memories", "list", "--tenant", "organization:7", "--json",
                              "--db", url).stdout)
    assert sorted(m["scope"] for m in memories) == ["personal", "tenant"]


def test_since_takes_a_month_and_a_year(url: str) -> None:
    for since in ("2026-11", "2026", "2026-11-01", "2026-11-01T09:30:00+01:00"):
        assert run("usage", "--since", since, "--db", url).exit_code == 0


def test_sessions_list_never_cuts_an_id(url: str) -> None:
    """Even at 40 columns the id shown is whole: the short form (a unique prefix, which
    every command accepts) or with --wide the full id, never one cut with an ellipsis."""
    with Chatkeep(url, dispatcher="inline") as keep:
        (session,) = keep.sessions.list(ORG)
    listed = run("sessions", "list", "--tenant", "organization:7", "--db", url,
                 env={"COLUMNS": "40"})
    assert session.id[:8] in listed.output and "…" not in listed.output
    wide = run("sessions", "list", "--tenant", "organization:7", "--wide", "--db", url,
               env={"COLUMNS": "40"})
    assert session.id in wide.output


def test_sessions_show_tail_and_sizes(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    with Chatkeep(db, dispatcher="inline") as keep:
        session = keep.sessions.create(ORG)
        for i in range(60):
            session.add_user(f"message number {i}")
        session.add_tokens(7)
    default = run("sessions", "show", session.id, "--db", db, env={"COLUMNS": "120"})
    assert "message number 59" in default.output and "message number 9\n" not in \
        default.output.replace(" ", "").replace("│", "")
    assert "showing the last 50 of 60 messages" in default.output
    tail = run("sessions", "show", session.id, "--tail", "2", "--db", db,
               env={"COLUMNS": "120"})
    assert "message number 58" in tail.output and "message number 57" not in tail.output
    assert "billed 7 tokens" in tail.output and re.search(r"conversation \d+ tokens",
                                                          tail.output)
    everything = json.loads(run("sessions", "show", session.id, "--json", "--db", db).stdout)
    assert len(everything["messages"]) == 60
    last = json.loads(run("sessions", "show", session.id, "--json", "--tail", "1",
                          "--db", db).stdout)
    assert [m["content"] for m in last["messages"]] == ["message number 59"]
    full = run("sessions", "show", session.id, "--all", "--db", db, env={"COLUMNS": "120"})
    assert "message number 0" in full.output and "showing the last" not in full.output


def test_history_in_every_format(url: str) -> None:
    assert {f.value for f in WireFormatName} == set(FORMATS)
    with Chatkeep(url, dispatcher="inline") as keep:
        (session,) = keep.sessions.list(ORG)
        session.add_tool_result("call-open", "clause 5")
    for fmt in FORMATS:
        result = run("history", session.id, "--format", fmt, "--system", "Be brief.",
                     "--db", url)
        assert result.exit_code == 0, result.output
        json.loads(result.stdout)


# -- the demo ----------------------------------------------------------------------------------

def test_demo_honours_the_database_variable_and_prints_a_one_line_hint(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'from-env.db'}"
    result = run("demo", "--budget", "300", env={"CHATKEEP_DATABASE_URL": db,
                                                  "COLUMNS": "50"})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "from-env.db").exists()
    with Chatkeep(db, dispatcher="inline") as keep:
        (session,) = keep.sessions.list(Ref("organization", "demo-firm"))
    assert f"Inspect: chatkeep sessions show {session.id}\n" in result.output
    assert re.search(r"over budget: \S", result.output)  # flagged with the reason

    elsewhere = tmp_path / "elsewhere dir"
    elsewhere.mkdir()
    other = f"sqlite:///{elsewhere / 'demo.db'}"
    result = run("demo", "--db", other, env={"COLUMNS": "50"})
    hint = next(line for line in result.output.splitlines() if line.startswith("Inspect:"))
    assert hint.endswith(f"--db '{other}'")  # quoted for the shell: the path has a space


# -- help ----------------------------------------------------------------------------------------

def _parameters(command: Any, path: list[str]) -> list[tuple[str, Any]]:
    found = [(" ".join(path), p) for p in command.params]
    for name, sub in (getattr(command, "commands", None) or {}).items():
        found.extend(_parameters(sub, [*path, name]))
    return found


def test_every_option_and_argument_has_help() -> None:
    missing = [f"{where} {p.name}" for where, p in
               _parameters(typer.main.get_command(app), ["chatkeep"])
               if not (getattr(p, "help", None) or "").strip()]
    assert missing == []


@pytest.mark.parametrize(("args", "shown"), [
    (["sweep", "--help"], ["default:", "memory.sweep_idle_after", "30m",
                           "memory.sweep_batch_size"]),
    (["sessions", "show", "--help"], ["default:", "50"]),
    (["demo", "--help"], ["default:", "2000", "CHATKEEP_DATABASE_URL"]),
    (["history", "--help"], ["openai_chat", "anthropic_messages"]),
    (["sessions", "list", "--help"], ["--json", "default:", "50"]),
    (["--help"], ["--version", "--verbose"]),
])
def test_help_renders_defaults(args: list[str], shown: list[str]) -> None:
    result = run(*args, env={"COLUMNS": "250"})
    assert result.exit_code == 0
    for text in shown:
        assert text in result.output, (text, result.output)
    assert "(, ," not in result.output  # no bracketed text eaten as markup
