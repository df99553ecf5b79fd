"""``--help`` reads as paragraphs at any width: no docstring line break survives inside a
paragraph of any command's or option's help (they broke lines mid-sentence)."""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from chatkeep.cli import app

runner = CliRunner()


def walk(command: Any, path: str = "chatkeep") -> list[tuple[str, str]]:
    texts = [(path, command.help or "")]
    texts += [(f"{path} {p.name}", p.help or "") for p in command.params
              if getattr(p, "help", None)]
    for name, sub in getattr(command, "commands", {}).items():
        texts += walk(sub, f"{path} {name}")
    return texts


def test_no_help_paragraph_holds_a_line_break() -> None:
    root = typer.main.get_command(app)
    texts = walk(root)
    assert len(texts) > 40
    broken = [where for where, text in texts
              if any("\n" in paragraph for paragraph in text.split("\n\n"))]
    assert broken == []


def test_help_at_80_columns_wraps_within_the_terminal() -> None:
    result = runner.invoke(app, ["history", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "A preview by default: nothing is folded, stored or billed" in text
