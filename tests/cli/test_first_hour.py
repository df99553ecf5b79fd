"""The CLI's rough edges from a newcomer's first hour (issue 35, items 7-9): the demo says
its tenant, ``chatkeep tenants`` lists a database's tenants, ``sessions list`` shows the
title, ``usage`` heads each tenant's lines once, flags show no ``<bool>``, and
``postgres://`` is PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref
from chatkeep.cli import app
from chatkeep.messages import Usage

runner = CliRunner()
ACME = Ref("organization", "acme-industries-international")
SMALL = Ref("organization", 7)
TITLE = "Refund for the damaged espresso machine delivered to the Leeds office"


@pytest.fixture(autouse=True)
def _console_width(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from chatkeep.cli.common import console

    monkeypatch.setattr(console, "width", console.width)
    yield


def run(columns: int, *args: str) -> list[str]:
    from chatkeep.cli.common import console

    console.width = columns
    result = runner.invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'first.db'}"
    with Chatkeep(url) as keep:
        for i in range(3):
            s = keep.sessions.open(f"ticket-{i}", tenant=ACME, actor=Ref("user", "alice"),
                                   title=f"{TITLE} (#{i})")
            s.add_user("hello")
            s.add_assistant("hi")
        s.record_usage("chat", Usage(1_200, 300), "gpt-4o")
        s.record_usage("summary", Usage(800, 100), "gpt-4o-mini")
        other = keep.sessions.create(SMALL)
        other.add_user("one")
        other.add_tokens(5)
    return url


def test_tenants_lists_each_tenant_with_its_counts(url: str) -> None:
    lines = run(80, "tenants", "--db", url)
    assert all(len(line) <= 80 for line in lines)
    text = " ".join(" ".join(lines).split())
    row = next(line for line in lines if line.strip().startswith(str(SMALL)))
    assert row.split()[1:4] == ["1", "1", "5"]  # sessions, messages, tokens
    assert str(ACME)[:20] in text
    data = json.loads(runner.invoke(app, ["tenants", "--json", "--db", url]).stdout)
    by_tenant = {(d["tenant"]["type"], d["tenant"]["id"]): d for d in data}
    acme = by_tenant[("organization", "acme-industries-international")]
    assert (acme["sessions"], acme["messages"], acme["tokens"]) == (3, 6, 2_400)
    assert by_tenant[("organization", 7)]["sessions"] == 1


def test_tenants_of_an_empty_database_and_of_a_missing_file(tmp_path: Path) -> None:
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    Chatkeep(empty).start().close()
    assert run(80, "tenants", "--db", empty) == [
        "no tenants: the database holds no sessions"]
    missing = runner.invoke(app, ["tenants", "--db", f"sqlite:///{tmp_path / 'nope.db'}"])
    assert missing.exit_code == 1 and "nope.db" in missing.output
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize("columns", [80, 200])
def test_sessions_list_shows_the_title_wrapped(url: str, columns: int) -> None:
    lines = run(columns, "sessions", "list", "--tenant", str(ACME), "--db", url)
    assert all(len(line) <= columns for line in lines)
    head = next(line for line in lines if "session" in line and "messages" in line)
    start, end = head.index("session"), head.index("messages")
    cells = " ".join(line[start:end].strip() for line in lines[lines.index(head) + 2:])
    for i in range(3):
        assert f"{TITLE} (#{i})" in " ".join(cells.split())
        assert f"key ticket-{i}" in cells
    wide = run(200, "sessions", "list", "--tenant", str(ACME), "--wide", "--db", url)
    assert "title" in wide[1] and any(f"{TITLE} (#0)" in line for line in wide)


@pytest.mark.parametrize("columns", [80, 200])
def test_usage_heads_each_tenants_lines_once(url: str, columns: int) -> None:
    lines = run(columns, "usage", "--db", url)
    assert all(len(line) <= columns for line in lines)
    heads = [line.strip() for line in lines if line.strip().startswith("tenant ")]
    assert sorted(heads) == sorted([f"tenant {ACME}", f"tenant {SMALL}"])
    acme = lines[lines.index(next(x for x in lines if x.strip() == f"tenant {ACME}")):]
    purposes = [line.split()[0] for line in acme[1:] if line.strip()
                and line.split()[0] in ("chat", "summary", "manual")][:2]
    assert purposes == ["chat", "summary"]  # its lines, under one heading


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_no_flag_shows_a_bool_metavar() -> None:
    root = typer.main.get_command(app)
    paths = list(_commands(root))
    assert len(paths) > 15
    shown = []
    for path in paths:
        text = "\n".join(run(80, *path, "--help"))
        if "<bool>" in text:
            shown.append(" ".join(path) or "chatkeep")
    assert shown == []
    assert "--json" in "\n".join(run(80, "tenants", "--help"))


def test_a_postgres_url_is_postgresql(pg_schema_url: str) -> None:
    with Chatkeep(pg_schema_url) as keep:
        keep.sessions.create(SMALL).add_user("hi")
    short = pg_schema_url.replace("postgresql+psycopg://", "postgres://", 1) \
        .replace("postgresql://", "postgres://", 1)
    assert short.startswith("postgres://")
    lines = run(80, "tenants", "--db", short)
    assert any(line.strip().startswith(str(SMALL)) for line in lines)


def test_the_demo_says_its_tenant_and_no_two_folds_read_alike(tmp_path: Path) -> None:
    from chatkeep.cli.common import console

    console.width = 400  # each fold on one line
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = runner.invoke(app, ["demo", "--db", url, "--budget", "1200"],
                           env={"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "",
                                "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "Tenant: organization:demo-firm" in result.stdout
    assert any(line.startswith("List: chatkeep sessions list --tenant organization:demo-firm")
               for line in lines)
    folds = [line.strip() for line in lines if "now covers seq" in line]
    assert len(folds) >= 3
    details = [line.split(";", 1)[1] for line in folds]
    assert len(set(details)) == len(details), details  # each fold says what it added
    listed = run(80, "sessions", "list", "--tenant", "organization:demo-firm", "--db", url)
    assert any("chatkeep demo" in line for line in listed)  # the demo's title shows
