"""``docs/cli.md`` says what the CLI does (issue 35, item 6): its command table names every
command the CLI has, and it no longer says ``sessions list`` shows whole ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from chatkeep.cli import app

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
#: ``db upgrade``'s line names the others ("also: downgrade REV, current, stamp").
DB_ALSO = {"chatkeep db downgrade", "chatkeep db current", "chatkeep db stamp"}


def commands(command: Any, path: str = "chatkeep") -> list[str]:
    subs = getattr(command, "commands", {})
    if not subs:
        return [path]
    return [name for key, sub in subs.items() for name in commands(sub, f"{path} {key}")]


def test_the_command_table_names_every_command() -> None:
    table = PAGE.read_text("utf-8").split("```", 2)[1]
    names = commands(typer.main.get_command(app))
    assert "chatkeep privacy rekey" in names and "chatkeep tenants" in names
    missing = [name for name in names
               if name not in table and name not in DB_ALSO]
    assert missing == [], f"docs/cli.md's command table lacks {missing}"


def test_the_page_says_sessions_list_shows_unique_prefixes() -> None:
    text = " ".join(PAGE.read_text("utf-8").split())
    assert "nor does `sessions list`" not in text
    assert "`sessions list` shows each id by its shortest unique prefix" in text
