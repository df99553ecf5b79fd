"""What an embedding endpoint sees when ``privacy.anonymize_pii`` is on (issue 20, items 2
and 8): every value the session knows as personal is masked by its type (``<PERSON>``), in
the recall query, in a memory's first embedding, in its retries and in the backfill; and a
memory carries its values whatever its source session's own switch was, so a session that
recalls it redacts them.

End to end: the real ``openai`` SDK against ``FakeOpenAIServer``, which records every request
body (chat and ``/v1/embeddings``); the embedder is configured by ``memory.embedding_model``
so the sync and async APIs both build theirs.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from typing import Any

import openai
import pytest
from memory_helpers import ALICE, ORG, Player, talk

from chatkeep import Chatkeep
from chatkeep.memory.embedders import HashEmbedder
from chatkeep.testing import FakeOpenAIServer

NAME, SURNAME = "Ana García", "García"
SSN_FORMS = ["536221234", "536-22-1234", "536 22 1234"]
SYSTEM = "You help customers."


@pytest.fixture
def pkeep(make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI, player: Player,
          llm_server: FakeOpenAIServer, requires_pgvector: None) -> Chatkeep:
    """Redaction on, recall in the history, embeddings on the recording server (skipped on
    a PostgreSQL without pgvector)."""
    llm_server.embedder = HashEmbedder(64, model="fake-embed")
    return make_keep(model=openai_client, config={
        "privacy": {"anonymize_pii": True},
        "memory": {"embedding_model": "fake-embed", "recall_in_history": True,
                   "embedding_base_url": llm_server.base_url},
        "llm": {"max_retries": 0}})


def _forms(value: str) -> set[str]:
    """The value as typed and without accents, case-folded (so any case matches)."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", value)
                    if not unicodedata.combining(c))
    return {value.casefold(), plain.casefold()}


def assert_never_raw(bodies: list[str], *values: str) -> None:
    """No form of any value in any body, read as sent and with JSON escapes decoded
    (``García`` goes on the wire as ``Garc\\u00eda``)."""
    for body in bodies:
        try:
            decoded = json.dumps(json.loads(body), ensure_ascii=False)
        except ValueError:
            decoded = body
        for text in (body.casefold(), decoded.casefold()):
            for value in values:
                for form in _forms(value):
                    assert form not in text, f"raw {value!r} left in: {decoded[:300]}"


def embedding_bodies(server: FakeOpenAIServer) -> list[str]:
    return [b for b in server.bodies() if '"messages"' not in b and '"input"' in b]


def embedded_texts(server: FakeOpenAIServer) -> list[str]:
    return [text for request in server.embedding_requests for text in request["input"]]


def test_a_value_in_the_sessions_vault_is_masked_in_the_recall_query(
        pkeep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    """Item 2a: once detected, a name is personal wherever it reappears, cue or not; the
    recognizers alone miss it in a later question."""
    session = pkeep.sessions.create(ORG, ALICE)
    talk(session, "My name is Ana García.", "Nice to meet you.")
    pkeep.compressor.build_history(session, SYSTEM)  # detected: the vault names her now
    # No cue here: only the vault knows this is a name.
    session.add_user("Is Ana García's order shipped?")
    pkeep.compressor.build_history(session, SYSTEM)
    pkeep.memory.recall(session, query="Is Ana García's order shipped?")
    assert "Is <PERSON>'s order shipped?" in embedded_texts(llm_server)
    assert_never_raw(embedding_bodies(llm_server), NAME, SURNAME)


def test_a_bare_value_answering_a_question_is_masked_in_the_recall_query(
        pkeep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    """Item 2b: a bare number is an SSN only read with the question it answers."""
    session = pkeep.sessions.create(ORG, ALICE)
    talk(session, "I need to update my records.", "Sure. What's your SSN?", "536221234")
    pkeep.compressor.build_history(session, SYSTEM)
    assert "<US_SSN>" in embedded_texts(llm_server)
    assert_never_raw(embedding_bodies(llm_server), *SSN_FORMS)


def test_a_retracted_message_is_never_the_recall_query(
        pkeep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    """Item 2c: a retracted message was taken back; it must not leave, masked or not."""
    session = pkeep.sessions.create(ORG, ALICE)
    talk(session, "Please confirm the delivery window.", "Sure.",
         "Forward this to Ana García please")  # pasted by mistake, then taken back
    session.retract_last()
    pkeep.compressor.build_history(session, SYSTEM)
    assert embedded_texts(llm_server) == ["Please confirm the delivery window."]
    assert_never_raw(embedding_bodies(llm_server), NAME, SURNAME)


def test_a_failed_embedding_is_retried_and_backfilled_masked_like_the_first_attempt(
        pkeep: Chatkeep, player: Player, llm_server: FakeOpenAIServer) -> None:
    """Item 2d: a retry or a backfill has only the memory's ``sealed_pii``; it must send
    exactly what the first attempt sent."""
    session = pkeep.sessions.create(ORG, ALICE)
    talk(session, "My name is Ana García.", "Noted.")
    llm_server.fail_embeddings(1, status=503)  # the batched embedding of the new fact
    player.will_extract(("personal", "<PERSON_1> prefers email."))
    pkeep.memory.distil(session.id)
    (memory,) = pkeep.memory.list(ORG)
    assert memory.content == "Ana García prefers email." and memory.sealed_pii is not None
    status = pkeep.memory.vector_status(ORG)
    assert status is not None and status.missing == 1
    assert pkeep.memory.embed_missing().embedded == 1
    # The failed call, the candidate search's retry and the backfill: all masked alike.
    assert embedded_texts(llm_server).count("<PERSON> prefers email.") == 3
    assert_never_raw(embedding_bodies(llm_server), NAME, SURNAME)


def test_a_memory_from_a_session_with_its_switch_off_carries_its_values(
        pkeep: Chatkeep, player: Player, llm_server: FakeOpenAIServer) -> None:
    """Item 8: the source session's switch lets its own text go out raw, but the values
    stay personal for the redacting sessions that recall the memory."""
    off = pkeep.sessions.create(ORG, ALICE)
    off.set_anonymize_pii(False)  # this conversation goes out raw, by the user's choice
    talk(off, "My name is Ana García.", "Noted.")
    player.will_extract(("personal", "The customer is Ana García."))
    pkeep.memory.distil(off.id)
    sent: Any = json.dumps(player.extractions[-1], ensure_ascii=False)
    assert NAME in sent, "a session whose switch is off is never redacted"
    (memory,) = pkeep.memory.list(ORG)
    assert memory.sealed_pii is not None, "the memory carries the name it holds"
    # Its embedding was masked all the same (the endpoint never sees raw values).
    assert "The customer is <PERSON>." in embedded_texts(llm_server)
    assert_never_raw(embedding_bodies(llm_server), NAME, SURNAME)
    # Recalled into a redacting session of the same user, the name is redacted.
    mark = len(llm_server.bodies())
    later = pkeep.sessions.create(ORG, ALICE)
    later.add_user("Hello again, what do you know about me?")
    history = pkeep.compressor.build_history(later, SYSTEM)
    assert "The customer is <PERSON_1>." in json.dumps(history)
    assert_never_raw([*llm_server.bodies()[mark:], json.dumps(history)], NAME, SURNAME)
