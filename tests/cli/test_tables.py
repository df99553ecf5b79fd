"""The CLI's tables at 80 columns (the width when piped) and at 200: nothing cut, numbers
whole, text wrapped in its column, short ids that commands accept back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref
from chatkeep.cli import app
from chatkeep.cli.tables import short_ids

runner = CliRunner()
MEMORY = ("The customer prefers invoices in Swiss francs, sent to the finance team on the "
          "first working day of each month.")
ORG = Ref("organization", "acme-industries-international")


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'tables.db'}"
    with Chatkeep(url) as keep:
        for i in range(3):
            s = keep.sessions.open(f"support-ticket-{i}", tenant=ORG,
                                   actor=Ref("user", "alice.longname@example"),
                                   subject=Ref("ticket", 1234567 + i))
            s.add_user("hello")
        s.add_tokens(12_345_678)
        keep.memory.add(ORG, MEMORY)
    return url


@pytest.fixture(autouse=True)
def _console_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``run`` sets the width; whatever another test fixed it at is put back after."""
    from chatkeep.cli.common import console

    monkeypatch.setattr(console, "width", console.width)


def run(url: str, columns: int, *args: str) -> list[str]:
    from chatkeep.cli.common import console

    console.width = columns
    result = runner.invoke(app, [*args, "--db", url], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def column(lines: list[str], header: str, next_header: str) -> str:
    """One column's text, its lines joined (a wrapped cell reads back whole)."""
    head = next(line for line in lines if header in line and next_header in line)
    start, end = head.index(header), head.index(next_header)
    return "".join(line[start:end].strip() for line in lines[lines.index(head) + 1:])


@pytest.mark.parametrize("columns", [80, 200])
def test_sessions_list_fits_and_cuts_nothing(url: str, columns: int) -> None:
    lines = run(url, columns, "sessions", "list", "--tenant", str(ORG))
    assert all(len(line) <= columns for line in lines)
    text = "".join(lines)
    assert "12,345,678" in text and "…" not in text
    keys = column(lines, "session", "messages")  # wrapped cells read back whole
    for i in range(3):
        assert f"support-ticket-{i}" in keys
    if columns == 200:  # one line per session
        assert len([line for line in lines if "support-ticket" in line]) == 3


def test_a_short_id_from_the_list_opens_the_session(url: str) -> None:
    lines = run(url, 80, "sessions", "list", "--tenant", str(ORG))
    first = next(line for line in lines if re.match(r"\s*[0-9a-f]{8}", line))
    short = first.split()[0]
    assert 8 <= len(short) < 36
    shown = run(url, 80, "sessions", "show", short)
    assert short in shown[0]
    assert runner.invoke(app, ["sessions", "show", "ffffffff-f", "--db", url]).exit_code == 1


def test_wide_shows_whole_ids_and_every_column(url: str) -> None:
    lines = run(url, 200, "sessions", "list", "--tenant", str(ORG), "--wide")
    assert any(re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", line)
               for line in lines)
    assert "subject" in lines[1] and "ticket:1234567" in "".join(lines)


@pytest.mark.parametrize("columns", [80, 200])
def test_usage_keeps_the_tenant_and_numbers_whole(url: str, columns: int) -> None:
    lines = run(url, columns, "usage")
    assert all(len(line) <= columns for line in lines)
    # The tenant heads its lines, whole, once (in a column it wrapped on every row).
    assert [line.strip() for line in lines if "tenant" in line] == [f"tenant {ORG}"]
    assert "12,345,678" in "".join(lines) and "…" not in "".join(lines)


def test_short_ids_are_the_shortest_unique_prefixes() -> None:
    ids = ["01a240eb-5c5a-7d9e", "01a240eb-5c46-7496", "01b00000-0000-0000"]
    shown = short_ids(ids)
    assert shown == {ids[0]: "01a240eb-5c5", ids[1]: "01a240eb-5c4", ids[2]: "01b00000"}
    assert short_ids(ids, wide=True) == {i: i for i in ids}


@pytest.mark.parametrize("columns", [80, 200])
def test_memories_list_wraps_the_memory_instead_of_cutting_it(url: str, columns: int) -> None:
    lines = run(url, columns, "memories", "list", "--tenant", str(ORG))
    assert all(len(line) <= columns for line in lines)
    head = next(line for line in lines if "memory" in line and "scope" in line)
    start = head.index("memory")
    text = " ".join(line[start:].strip() for line in lines[lines.index(head) + 1:]
                    if line[start:].strip())
    assert " ".join(MEMORY.split()) in " ".join(text.split())

