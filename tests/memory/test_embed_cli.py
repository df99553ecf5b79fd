"""``chatkeep memories embed`` and the recall line of ``chatkeep memories list``."""

from __future__ import annotations

import pytest
import typer
from memory_helpers import ALICE, ORG, Player, remember
from typer.testing import CliRunner

from chatkeep import Chatkeep
from chatkeep.cli.memories import memories_app
from chatkeep.memory.embedders import HashEmbedder
from chatkeep.testing import FakeOpenAIServer

# Embedders passed here are sync; the async embedder is tested in tests/aio.
pytestmark = pytest.mark.sync_api
app = typer.Typer()
app.add_typer(memories_app, name="memories")
runner = CliRunner()


@pytest.mark.usefixtures("requires_pgvector")
def test_embed_command_embeds_what_is_missing_and_list_says_how_recall_ranks(
        mkeep: Chatkeep, player: Player, db_url: str, llm_server: FakeOpenAIServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    remember(mkeep, player, s, ("personal", "Prefers espresso over tea."),
             ("tenant", "Quotes are in EUR."), ("tenant", "Close the office at six."))
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    listed = runner.invoke(app, ["memories", "list", "--tenant", "organization:1",
                                 "--db", db_url])
    assert listed.exit_code == 0, listed.output
    assert "recall: full-text only" in listed.output
    not_configured = runner.invoke(app, ["memories", "embed", "--db", db_url])
    assert not_configured.exit_code == 1
    assert "no embedding model configured" in not_configured.output
    monkeypatch.setenv("CHATKEEP_MEMORY__EMBEDDING_MODEL", "fake-embed")
    llm_server.embedder = HashEmbedder(32, model="fake-embed")
    waiting = runner.invoke(app, ["memories", "list", "--tenant", "organization:1",
                                  "--db", db_url])
    assert "recall: hybrid (full text + fake-embed vectors); 0 of 3 live memories " \
        "embedded, 3 waiting" in " ".join(waiting.output.split())
    llm_server.fail_embeddings(1, status=400)  # not retried by the SDK
    failed = runner.invoke(app, ["memories", "embed", "--batch-size", "2", "--db", db_url])
    assert failed.exit_code == 1
    assert "1 embedded, 2 failed (2 requests to fake-embed)" in failed.output
    again = runner.invoke(app, ["memories", "embed", "--batch-size", "2", "--db", db_url])
    assert again.exit_code == 0, again.output
    assert "2 embedded, 0 failed (1 requests to fake-embed)" in again.output
    done = runner.invoke(app, ["memories", "embed", "--db", db_url])
    assert done.exit_code == 0 and "nothing to embed: all 3 live memories" in done.output
    embedded = runner.invoke(app, ["memories", "list", "--tenant", "organization:1",
                                   "--db", db_url])
    assert "3 of 3 live memories embedded" in " ".join(embedded.output.split())
    sizes = [len(r["input"]) for r in llm_server.embedding_requests]
    assert sizes == [2, 1, 2]  # batched: failed [a, b], then [c]; the rerun [a, b]
