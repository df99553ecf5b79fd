"""The chatkeep command, run in-process with Typer's runner against a SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref
from chatkeep.cli import app
from chatkeep.cli.demo import demo_messages

runner = CliRunner()


def test_demo_compresses_and_loses_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = runner.invoke(app, ["demo", "--db", url, "--budget", "2000"],
                           env={"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""})
    assert result.exit_code == 0, result.output
    assert "offline extractive summarizer" in result.output
    keep = Chatkeep(url)
    (session,) = keep.sessions.list(Ref("organization", "demo-firm"))
    assert session.message_count == len(demo_messages())
    assert session.summary_watermark > 0 and session.summary
    assert f"watermark seq {session.summary_watermark}" in result.output
    keep.close()


def test_import_show_history_usage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    lines = [
        {"role": "user", "content": "Find clause 4"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function",
             "function": {"name": "lookup", "arguments": "{\"n\": 4}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "Clause 4 text"},
        {"role": "assistant", "content": "Clause 4 covers termination."},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = runner.invoke(app, ["import", str(path), "--tenant", "organization:7",
                                 "--actor", "user:3", "--db", url])
    assert result.exit_code == 0, result.output
    assert "imported 4 messages" in result.output
    keep = Chatkeep(url)
    (session,) = keep.sessions.list(Ref("organization", 7))
    assert session.actor == Ref("user", 3)
    assert [m.role.value for m in session.messages] == ["user", "assistant", "tool", "assistant"]

    shown = runner.invoke(app, ["sessions", "show", session.id, "--db", url])
    assert shown.exit_code == 0, shown.output
    assert "call_9" in shown.output and "lookup" in shown.output
    wrong = runner.invoke(app, ["sessions", "show", session.id, "--tenant", "organization:8",
                                "--db", url])
    assert wrong.exit_code == 1 and "SessionNotFound" in wrong.output

    history = runner.invoke(app, ["history", session.id, "--system", "Be brief.", "--db", url])
    assert history.exit_code == 0, history.output
    assert json.loads(history.stdout) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Find clause 4"},
        {"role": "assistant", "content": "Clause 4 covers termination."},
    ]
    session.add_tokens(12)
    usage = runner.invoke(app, ["usage", "--tenant", "organization:7", "--db", url])
    assert usage.exit_code == 0 and "total tokens: 12" in usage.output
    keep.close()


def test_import_of_a_bad_file_writes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    path = tmp_path / "bad.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n'
                    '{"role": "tool", "tool_call_id": "nope", "content": "x"}\n')
    result = runner.invoke(app, ["import", str(path), "--tenant", "organization:7", "--db", url])
    assert result.exit_code == 1
    assert "line 2" in result.output and "answers no earlier call" in result.output
    keep = Chatkeep(url)
    assert keep.sessions.list(Ref("organization", 7)) == []
    keep.close()


def test_stored_text_with_brackets_is_shown_as_typed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    keep = Chatkeep(url)
    session = keep.sessions.create(Ref("organization", 7))
    session.add_user("Install chatkeep[postgres] and see [bold]this[/bold] and [/]")
    shown = runner.invoke(app, ["sessions", "show", session.id, "--db", url])
    assert shown.exit_code == 0, shown.output
    assert "chatkeep[postgres]" in shown.output and "[bold]this[/bold]" in shown.output
    keep.close()


def test_missing_driver_error_names_the_extra(monkeypatch) -> None:
    import chatkeep.store.engine as engine_module

    def no_driver(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'psycopg'")

    monkeypatch.setattr(engine_module, "create_engine", no_driver)
    result = runner.invoke(app, ["usage", "--db", "postgresql://app@127.0.0.1/chat"])
    assert result.exit_code == 1
    assert '"chatkeep[postgres]"' in result.output  # the extra survives rich's markup


def test_sessions_show_marks_retracted_messages(tmp_path: Path) -> None:
    # What pop_item and clear_session retract stays in the record, marked as such.
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Chatkeep(url) as keep:
        session = keep.sessions.create(Ref("organization", 7))
        session.add_user("kept question")
        session.add_assistant("popped answer")
        session.retract_last()
        session_id = session.id
    shown = runner.invoke(app, ["sessions", "show", session_id, "--db", url])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()  # each message: its heading, then its text under it
    heading = {lines[i + 1].strip(): lines[i] for i in range(len(lines) - 1)}
    assert heading["popped answer"].startswith("#2 assistant (retracted)")
    assert heading["kept question"].startswith("#1 user ·")
    as_json = runner.invoke(app, ["sessions", "show", session_id, "--json", "--db", url])
    assert as_json.exit_code == 0, as_json.output
    messages = json.loads(as_json.output)["messages"]
    assert [(m["seq"], m["retracted_at"] is not None) for m in messages] == [(1, False),
                                                                               (2, True)]


def test_commands_refuse_a_database_from_a_newer_chatkeep(tmp_path: Path) -> None:
    """alembic_version names a migration this chatkeep does not ship (a rollback mid-deploy):
    reads must not run against a schema they do not know, and nothing says "unexpected"."""
    import sqlite3

    from chatkeep.store import migrate

    url = f"sqlite:///{tmp_path / 'n.db'}"
    with Chatkeep(url) as keep:
        session_id = keep.sessions.create(Ref("organization", 7)).id
    with sqlite3.connect(tmp_path / "n.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099_from_a_newer_chatkeep'")
    (tmp_path / "one.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    for args in (["sessions", "list", "--tenant", "organization:7"],
                 ["sessions", "show", session_id], ["history", session_id], ["usage"],
                 ["memories", "list", "--tenant", "organization:7"],
                 ["import", str(tmp_path / "one.jsonl"), "--tenant", "organization:7"],
                 ["db", "upgrade"]):
        result = runner.invoke(app, [*args, "--db", url], env={"COLUMNS": "300"})
        assert result.exit_code == 1, (args, result.output)
        assert "0099_from_a_newer_chatkeep" in result.output, (args, result.output)
        assert migrate.head_revision() in result.output, (args, result.output)
        assert "unexpected" not in result.output, (args, result.output)
    current = runner.invoke(app, ["db", "current", "--db", url], env={"COLUMNS": "300"})
    assert current.exit_code == 0 and "unknown here" in current.output, current.output


def test_sessions_by_the_applications_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    with Chatkeep(url) as keep:
        keep.sessions.open("support-4711", tenant=Ref("organization", 7)).add_user("refund?")
        keep.sessions.open("support-4711", tenant=Ref("organization", 8)).add_user("other")
    listed = runner.invoke(app, ["sessions", "list", "--tenant", "organization:7", "--json",
                                 "--db", url])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert row["key"] == "support-4711"
    shown = runner.invoke(app, ["sessions", "show", "support-4711", "--tenant",
                                "organization:7", "--db", url])
    assert shown.exit_code == 0, shown.output
    assert "refund?" in shown.output and "other" not in shown.output
    assert "key support-4711" in shown.output
    history = runner.invoke(app, ["history", "support-4711", "--tenant", "organization:8",
                                  "--db", url])
    assert history.exit_code == 0 and "other" in history.output
    nameless = runner.invoke(app, ["sessions", "show", "support-4711", "--db", url])
    assert nameless.exit_code == 1 and "SessionNotFound" in nameless.output


def test_history_previews_unless_asked_to_fold(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    settings = ["--db", url]
    with Chatkeep(url, config={"chat": {"max_history_tokens": 600,
                                        "recent_messages_min": 2}}) as keep:
        session = keep.sessions.create(tenant=Ref("organization", 7))
        for i in range(8):
            session.add_user(f"U{i} " + "question " * 40)
            session.add_assistant(f"A{i} " + "answer " * 40)
    env = {"CHATKEEP_CHAT__MAX_HISTORY_TOKENS": "600", "OPENAI_API_KEY": "",
           "OPENAI_BASE_URL": ""}
    preview = runner.invoke(app, ["history", session.id, *settings], env=env)
    assert preview.exit_code == 0, preview.output
    assert len(json.loads(preview.stdout)) == 16  # everything, nothing folded
    assert "the next call folds" in preview.stderr
    with Chatkeep(url) as keep:
        row = keep.sessions.get_unscoped(session.id).row
        assert (row.summary_watermark, row.total_tokens) == (0, 0)
    folded = runner.invoke(app, ["history", session.id, "--fold", *settings], env=env)
    assert folded.exit_code == 0, folded.output
    assert len(json.loads(folded.stdout)) < 16
    with Chatkeep(url) as keep:
        assert keep.sessions.get_unscoped(session.id).summary_watermark > 0
