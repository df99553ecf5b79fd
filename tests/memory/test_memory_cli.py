"""``chatkeep sweep`` and ``chatkeep memories list|forget`` (mounted as the README says)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import typer
from memory_helpers import ALICE, BOB, MATTER, ORG, Player, remember, talk
from typer.testing import CliRunner

from chatkeep import Chatkeep
from chatkeep.cli.memories import memories_app, sweep
from chatkeep.testing import FakeOpenAIServer

app = typer.Typer()
app.command()(sweep)
app.add_typer(memories_app, name="memories")
runner = CliRunner()


def test_sweep_command_distils_and_reports(make_keep: Callable[..., Chatkeep], db_url: str,
                                           llm_server: FakeOpenAIServer, player: Player,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    keep = make_keep()
    s = keep.sessions.create(ORG, ALICE, MATTER)
    talk(s, "Quotes are always in EUR.", "Noted.")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    offline = runner.invoke(app, ["sweep", "--idle-after", "0", "--db", db_url])
    assert offline.exit_code == 1 and "no model configured" in offline.output
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    player.will_extract(("tenant", "Quotes are in EUR."))
    result = runner.invoke(app, ["sweep", "--idle-after", "0", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert s.id[:8] in result.output and "1 distilled, 0 failed" in result.output
    again = runner.invoke(app, ["sweep", "--idle-after", "0", "--db", db_url])
    assert again.exit_code == 0 and "nothing to distil" in again.output
    assert [m.content for m in keep.memory.list(ORG)] == ["Quotes are in EUR."]


def test_memories_list_and_forget(mkeep: Chatkeep, player: Player, db_url: str) -> None:
    alice = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, alice, ("personal", "Prefers tea."), ("tenant", "Close at six."))
    bob = mkeep.sessions.create(ORG, BOB)
    remember(mkeep, player, bob, ("personal", "Prefers coffee."))
    listed = runner.invoke(app, ["memories", "list", "--tenant", "organization:1",
                                 "--db", db_url])
    assert listed.exit_code == 0, listed.output
    for text in ("Prefers tea.", "Close at six.", "Prefers coffee.", "user:10"):
        assert text in listed.output
    only = runner.invoke(app, ["memories", "list", "--tenant", "organization:1",
                               "--scope", "tenant", "--db", db_url])
    assert "Close at six." in only.output and "Prefers" not in only.output
    bad = runner.invoke(app, ["memories", "forget", "--tenant", "organization:1", "--yes",
                              "--db", db_url])
    assert bad.exit_code != 0
    declined = runner.invoke(app, ["memories", "forget", "--tenant", "organization:1",
                                   "--actor", "user:10", "--db", db_url], input="n\n")
    assert declined.exit_code != 0 and len(mkeep.memory.list(ORG)) == 3
    gone = runner.invoke(app, ["memories", "forget", "--tenant", "organization:1",
                               "--actor", "user:10", "--yes", "--db", db_url])
    assert gone.exit_code == 0 and "erased 1 memories" in gone.output
    assert sorted(m.content for m in mkeep.memory.list(ORG)) == ["Close at six.",
                                                                 "Prefers coffee."]
