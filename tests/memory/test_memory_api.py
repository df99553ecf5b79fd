"""Memories written one at a time: ``keep.memory.add / get / update / delete``.

The same rules as distilled memories: one tenant, one scope (a personal memory needs its
actor, a subject memory its subject), one live copy of a text per scope, supersession on
update (the old version kept for the record), erasure on delete. On both APIs (the
``keep`` fixture's sync and async axes) and both stores.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
import typer
from memory_helpers import ALICE, BOB, MATTER, ORG, OTHER_MATTER, OTHER_ORG
from typer.testing import CliRunner

from chatkeep import Chatkeep, MemoryNotFound, Ref
from chatkeep.cli.memories import memories_app
from chatkeep.errors import ChatkeepError, InvalidArgument, InvalidReference
from chatkeep.memory.embedders import HashEmbedder
from chatkeep.memory.service import MEMORY_CONTENT_MAX
from chatkeep.testing import FakeOpenAIServer

SYSTEM = "You help customers."
EMAIL = "ana.garcia@example.com"
SYNONYMS = {"espresso": "beverage", "coffee": "beverage", "tea": "beverage",
            "drink": "beverage"}


def test_add_get_update_delete(keep: Chatkeep) -> None:
    added = keep.memory.add(ORG, "Invoices are approved by the finance team")
    assert (added.tenant, added.scope, added.subject, added.actor) == (ORG, "tenant", None,
                                                                       None)
    assert added.superseded_by is None and added.source_session_id is None
    assert keep.memory.get(ORG, added.id) == added

    updated = keep.memory.update(ORG, added.id, "Invoices are approved by two directors")
    assert updated.id != added.id and updated.scope == "tenant"
    old = keep.memory.get(ORG, added.id)  # kept for the record, out of recall
    assert old.content == added.content and old.superseded_by == updated.id
    assert [m.content for m in keep.memory.list(ORG)] == [updated.content]
    with pytest.raises(InvalidArgument, match=f"superseded by memory {updated.id}"):
        keep.memory.update(ORG, added.id, "Invoices need no approval")

    assert keep.memory.delete(ORG, updated.id) is True
    for gone in (updated.id, added.id):  # the earlier version goes with it
        with pytest.raises(MemoryNotFound):
            keep.memory.get(ORG, gone)
    assert keep.memory.list(ORG, include_superseded=True) == []
    assert keep.memory.delete(ORG, updated.id) is False
    with pytest.raises(MemoryNotFound):
        keep.memory.update(ORG, updated.id, "anything")


def test_each_scope_and_its_reference(keep: Chatkeep) -> None:
    personal = keep.memory.add(ORG, "Prefers replies in Spanish", scope="personal",
                               actor=ALICE)
    subject = keep.memory.add(ORG, "The hearing is on 3 March", scope="subject",
                              subject=MATTER)
    assert (personal.scope, personal.actor, personal.subject) == ("personal", ALICE, None)
    assert (subject.scope, subject.subject, subject.actor) == ("subject", MATTER, None)
    # An update stays in its scope.
    moved = keep.memory.update(ORG, personal.id, "Prefers replies in Portuguese")
    assert (moved.scope, moved.actor) == ("personal", ALICE)
    assert [m.content for m in keep.memory.list(ORG, actor=ALICE)] == [moved.content]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"scope": "personal"}, "personal memory needs actor="),
    ({"scope": "personal", "subject": MATTER}, "personal memory needs actor="),
    ({"scope": "subject"}, "subject memory needs subject="),
    ({"scope": "subject", "actor": ALICE}, "subject memory needs subject="),
    ({"actor": ALICE}, "actor= is only for scope='personal'"),
    ({"subject": MATTER}, "subject= is only for scope='subject'"),
    ({"scope": "subject", "subject": MATTER, "actor": ALICE}, "actor= is only"),
    ({"scope": "actor", "actor": ALICE}, "unknown scope 'actor'"),
    ({"scope": "bogus"}, "unknown scope"),
    ({"scope": None}, "unknown scope"),
])
def test_scope_rules_refuse_what_has_no_owner(keep: Chatkeep, kwargs: dict[str, Any],
                                              message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        keep.memory.add(ORG, "Prefers tea", **kwargs)
    assert keep.memory.list(ORG) == []


def test_bad_arguments_are_refused_and_write_nothing(keep: Chatkeep) -> None:
    kept = keep.memory.add(ORG, "Office closes at 18:00")
    for content in ("", "   ", "?!", 5, None, "a\x00b", "x" * (MEMORY_CONTENT_MAX + 1)):
        with pytest.raises(InvalidArgument):
            keep.memory.add(ORG, content)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            keep.memory.update(ORG, kept.id, content)  # type: ignore[arg-type]
    bad_ids: list[Any] = [0, -1, True, "1", 2**63, 1.0]
    for memory_id in bad_ids:
        for call in (keep.memory.get, keep.memory.delete):
            with pytest.raises(InvalidArgument):
                call(ORG, memory_id)
    for tenant in ("organization:1", None):
        with pytest.raises(InvalidReference):
            keep.memory.add(tenant, "x")  # type: ignore[arg-type]
        with pytest.raises(InvalidReference):
            keep.memory.get(tenant, kept.id)  # type: ignore[arg-type]
    with pytest.raises(InvalidReference):
        keep.memory.add(ORG, "x", scope="personal", actor="user:1")  # type: ignore[arg-type]
    assert keep.memory.list(ORG, include_superseded=True) == [kept]
    assert len(keep.memory.add(ORG, "x" * MEMORY_CONTENT_MAX).content) == MEMORY_CONTENT_MAX


def test_one_live_copy_of_a_text_per_scope(keep: Chatkeep) -> None:
    first = keep.memory.add(ORG, "Lives in Lisbon", scope="personal", actor=ALICE)
    assert keep.memory.add(ORG, "lives in LISBON!", scope="personal", actor=ALICE) == first
    other_scope = keep.memory.add(ORG, "Lives in Lisbon", scope="personal", actor=BOB)
    assert other_scope.id != first.id
    # The same text once normalised is no change at all.
    assert keep.memory.update(ORG, first.id, "LIVES in Lisbon.") == first
    # An update to a text the scope holds already retires the old memory in its favour.
    porto = keep.memory.add(ORG, "Lives in Porto", scope="personal", actor=ALICE)
    merged = keep.memory.update(ORG, porto.id, "lives in lisbon")
    assert merged.id == first.id
    assert keep.memory.get(ORG, porto.id).superseded_by == first.id
    assert [m.id for m in keep.memory.list(ORG, actor=ALICE)] == [first.id]


def test_concurrent_adds_of_one_text_store_it_once(keep: Chatkeep) -> None:
    ids: list[int] = []
    errors: list[BaseException] = []

    def add() -> None:
        try:
            ids.append(keep.memory.add(ORG, "Quotes are always in EUR").id)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(set(ids)) == 1
    assert len(keep.memory.list(ORG)) == 1


def test_no_call_reaches_another_tenants_memory(keep: Chatkeep) -> None:
    mine = keep.memory.add(ORG, "Card ends in 4242", scope="personal", actor=ALICE)
    with pytest.raises(MemoryNotFound) as missing:
        keep.memory.get(OTHER_ORG, mine.id)
    assert isinstance(missing.value, LookupError) and isinstance(missing.value, ChatkeepError)
    with pytest.raises(MemoryNotFound):
        keep.memory.update(OTHER_ORG, mine.id, "Card ends in 1111")
    assert keep.memory.delete(OTHER_ORG, mine.id) is False
    assert keep.memory.get(ORG, mine.id) == mine
    # The same actor in another tenant is another person's memory space.
    theirs = keep.memory.add(OTHER_ORG, "Card ends in 4242", scope="personal", actor=ALICE)
    assert theirs.id != mine.id and theirs.tenant == OTHER_ORG
    assert [m.id for m in keep.memory.list(ORG)] == [mine.id]
    session = keep.sessions.create(OTHER_ORG, ALICE)
    assert [m.id for m in keep.memory.recall(session, query="card")] == [theirs.id]


def test_recall_finds_added_memories_by_words_within_the_sessions_scopes(
        keep: Chatkeep) -> None:
    keep.memory.add(ORG, "Invoices are approved by the finance team")
    keep.memory.add(ORG, "Alice prefers invoices by email", scope="personal", actor=ALICE)
    keep.memory.add(ORG, "Bob prefers invoices on paper", scope="personal", actor=BOB)
    keep.memory.add(ORG, "Invoices for this matter go to the court", scope="subject",
                    subject=MATTER)
    keep.memory.add(ORG, "Invoices for that matter are waived", scope="subject",
                    subject=OTHER_MATTER)
    alice = keep.sessions.create(ORG, ALICE, MATTER)
    found = {m.content for m in keep.memory.recall(alice, query="who approves invoices?")}
    assert found == {"Invoices are approved by the finance team",
                     "Alice prefers invoices by email",
                     "Invoices for this matter go to the court"}
    anonymous = keep.sessions.create(ORG)
    assert {m.content for m in keep.memory.recall(anonymous, query="invoices")} == {
        "Invoices are approved by the finance team"}
    # An update is recalled in its new words only; a deleted memory is not recalled.
    (email,) = keep.memory.list(ORG, actor=ALICE)
    keep.memory.update(ORG, email.id, "Alice prefers invoices through the portal")
    assert [m.content for m in keep.memory.recall(alice, query="portal email")] == [
        "Alice prefers invoices through the portal"]
    (court,) = keep.memory.list(ORG, subject=MATTER)
    assert keep.memory.delete(ORG, court.id)
    assert "court" not in " ".join(m.content for m in keep.memory.recall(alice, "court"))
    # forget erases added personal memories like distilled ones.
    assert keep.memory.forget(ORG, ALICE) == 2
    assert keep.memory.list(ORG, actor=ALICE, include_superseded=True) == []


@pytest.fixture
def embed_keep(make_keep: Callable[..., Chatkeep], llm_server: FakeOpenAIServer,
               requires_pgvector: None) -> Chatkeep:
    """Recall by meaning through the recording server's ``/v1/embeddings`` (so the sync and
    async APIs both build their embedder from the config), redaction on."""
    llm_server.embedder = HashEmbedder(64, model="fake-embed", synonyms=SYNONYMS)
    return make_keep(config={
        "privacy": {"anonymize_pii": True},
        "memory": {"embedding_model": "fake-embed", "embedding_base_url": llm_server.base_url,
                   "embedding_api_key": "test-key", "recall_in_history": True}})


def embedded_texts(server: FakeOpenAIServer) -> list[str]:
    return [text for request in server.embedding_requests for text in request["input"]]


def test_added_memories_are_embedded_masked_and_recalled_by_meaning(
        embed_keep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    keep = embed_keep
    drinks = keep.memory.add(ORG, f"Drinks espresso, write to {EMAIL}", scope="personal",
                             actor=ALICE)
    keep.memory.add(ORG, "Works from the Lisbon office", scope="personal", actor=ALICE)
    status = keep.memory.vector_status(ORG)
    assert status is not None and (status.embedded, status.missing) == (2, 0)
    # The vector was computed from the masked text; the stored text has the real value,
    # and the memory carries it sealed.
    assert "Drinks espresso, write to <EMAIL>" in embedded_texts(llm_server)
    assert all(EMAIL not in text for text in embedded_texts(llm_server))
    assert drinks.content.endswith(EMAIL) and drinks.sealed_pii is not None
    session = keep.sessions.create(ORG, ALICE)
    hits = keep.memory.recall(session, query="what kind of coffee?")  # no word in common
    assert hits and hits[0].id == drinks.id
    # A session that redacts gets the value under its own placeholder.
    session.add_user("What do I drink?")
    history = json.dumps(keep.compressor.build_history(session, SYSTEM))
    assert "Drinks espresso" in history and EMAIL not in history and "<EMAIL_" in history

    # An update is embedded too, and recall by meaning (the SQLite scope cache included)
    # sees the update and the deletion at once.
    tea = keep.memory.update(ORG, drinks.id, "Drinks green tea only")
    status = keep.memory.vector_status(ORG)
    assert status is not None and (status.embedded, status.missing) == (2, 0)
    hits = keep.memory.recall(session, query="which beverage?")
    assert hits[0].id == tea.id and drinks.id not in {m.id for m in hits}
    assert keep.memory.delete(ORG, tea.id)
    assert {m.id for m in keep.memory.recall(session, query="which beverage?")} & {
        tea.id, drinks.id} == set()
    added = keep.memory.add(ORG, "Loves strong coffee", scope="personal", actor=ALICE)
    assert keep.memory.recall(session, query="a drink?")[0].id == added.id


def test_a_failed_embedding_leaves_the_memory_for_embed_missing(
        embed_keep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    llm_server.fail_embeddings(10, status=503)
    memory = embed_keep.memory.add(ORG, "Prefers phone calls")  # written all the same
    status = embed_keep.memory.vector_status(ORG)
    assert status is not None and (status.embedded, status.missing) == (0, 1)
    session = embed_keep.sessions.create(ORG)
    assert [m.id for m in embed_keep.memory.recall(session, query="phone")] == [memory.id]
    llm_server._embedding_failures.clear()
    assert embed_keep.memory.embed_missing().embedded == 1


def test_the_cli_lists_added_memories(keep: Chatkeep, db_url: str) -> None:
    keep.memory.add(ORG, "Close at six")
    keep.memory.add(ORG, "Prefers tea", scope="personal", actor=ALICE)
    app = typer.Typer()
    app.add_typer(memories_app, name="memories")
    listed = CliRunner().invoke(app, ["memories", "list", "--tenant", "organization:1",
                                      "--db", db_url])
    assert listed.exit_code == 0, listed.output
    for text in ("Close at six", "Prefers tea", str(ALICE)):
        assert text in listed.output
    assert str(Ref("organization", 2)) not in listed.output
