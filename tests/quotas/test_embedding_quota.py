"""Embedding calls reserve on the tenant's quota too (issue 33): their input tokens before
the call, settled at what the endpoint reports, released on an error. A refused memory
embedding leaves the memory without its vector for ``embed_missing`` to fill in later; a
refused recall query is ranked by words only and says so, never raising into the turn.

Every call goes through the real ``openai`` SDK to the strict fake ``/v1/embeddings``,
which records (and so counts) each request.
"""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.memory.embedders import HashEmbedder, OpenAIEmbedder
from chatkeep.testing import FakeOpenAIServer
from chatkeep.testing.fake_openai import estimate_tokens
from chatkeep.tokens import HeuristicCounter

# Sync axis: the embedder given is sync, and the tests read the quota rows as they stand.
pytestmark = [pytest.mark.sync_api, pytest.mark.usefixtures("requires_pgvector")]

ORG = Ref("organization", 1)
OTHER = Ref("organization", 2)
FACT = "Invoices over 10,000 EUR need two signatures."


@pytest.fixture
def embedder(llm_server: FakeOpenAIServer) -> OpenAIEmbedder:
    client = openai.OpenAI(base_url=llm_server.base_url, api_key="test-key", max_retries=0,
                           timeout=5.0)
    return OpenAIEmbedder("fake-embed", client)


@pytest.fixture
def ekeep(make_keep: Callable[..., Chatkeep], embedder: OpenAIEmbedder) -> Chatkeep:
    """A keep that embeds on the fake wire; its counter over-estimates (one token a
    character) so a settle at the endpoint's count is told apart from the estimate."""
    return make_keep(embedder=embedder, counter=HeuristicCounter(chars_per_token=1))


def reported(server: FakeOpenAIServer, first: int = 0) -> int:
    """The input tokens the fake endpoint reported for its requests from ``first`` on."""
    return sum(estimate_tokens(len(text)) for body in server.embedding_requests[first:]
               for text in body["input"])


def spent_reserved(keep: Chatkeep, tenant: Ref = ORG) -> tuple[int, int]:
    quota = keep.quotas.get(tenant)
    assert quota is not None
    return quota.spent, quota.reserved


def test_an_embedding_is_reserved_then_settled_at_the_reported_usage(
        ekeep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    ekeep.quotas.set(ORG, tokens=10_000)
    memory = ekeep.memory.add(ORG, FACT)
    assert len(llm_server.embedding_requests) == 1
    assert ekeep.memory.vector_status(ORG).missing == 0  # type: ignore[union-attr]
    assert spent_reserved(ekeep) == (reported(llm_server), 0)
    assert reported(llm_server) < len(FACT)  # the settle replaced the estimate
    assert ekeep.quotas.store.reservations(ORG) == []
    assert memory.content == FACT


def test_a_refused_embedding_sends_nothing_and_the_backfill_fills_it_in_later(
        ekeep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    ekeep.quotas.set(ORG, tokens=5)  # less than the fact's estimate
    memory = ekeep.memory.add(ORG, FACT)
    assert memory.content == FACT  # written all the same, never lost
    assert llm_server.embedding_requests == []
    status = ekeep.memory.vector_status(ORG)
    assert status is not None and (status.embedded, status.missing) == (0, 1)
    assert spent_reserved(ekeep) == (0, 0)

    first = ekeep.memory.embed_missing()  # still refused: counted, left marked
    assert (first.embedded, first.failed, first.refused, first.batches) == (0, 0, 1, 0)
    assert llm_server.embedding_requests == []

    ekeep.quotas.set(ORG, tokens=10_000)
    again = ekeep.memory.embed_missing()
    assert (again.embedded, again.failed, again.refused, again.batches) == (1, 0, 0, 1)
    assert len(llm_server.embedding_requests) == 1
    assert spent_reserved(ekeep) == (reported(llm_server), 0)
    assert ekeep.memory.vector_status(ORG).missing == 0  # type: ignore[union-attr]


def test_the_backfill_reserves_per_tenant_and_refuses_only_the_tenant_over_quota(
        ekeep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    ekeep.quotas.set(ORG, tokens=0)
    ekeep.quotas.set(OTHER, tokens=0)
    ekeep.memory.add(ORG, FACT)
    ekeep.memory.add(OTHER, "Quotes are always in EUR.")
    ekeep.memory.add(ORG, "The warehouse is in Lyon.")
    ekeep.quotas.set(OTHER, tokens=10_000)
    result = ekeep.memory.embed_missing()
    assert (result.embedded, result.refused, result.batches) == (1, 2, 1)
    assert [body["input"] for body in llm_server.embedding_requests] == [
        ["Quotes are always in EUR."]]
    assert spent_reserved(ekeep, OTHER) == (reported(llm_server), 0)
    assert spent_reserved(ekeep, ORG) == (0, 0)


def test_a_failed_embedding_releases_its_reservation(
        ekeep: Chatkeep, llm_server: FakeOpenAIServer) -> None:
    ekeep.quotas.set(ORG, tokens=10_000)
    llm_server.fail_embeddings(1, status=503)
    ekeep.memory.add(ORG, FACT)
    assert len(llm_server.embedding_requests) == 1
    assert spent_reserved(ekeep) == (0, 0)  # nothing billed for a call that failed
    assert ekeep.quotas.store.reservations(ORG) == []
    assert ekeep.memory.vector_status(ORG).missing == 1  # type: ignore[union-attr]


def test_a_refused_recall_query_falls_back_to_words_and_says_so(
        make_keep: Callable[..., Chatkeep], ekeep: Chatkeep,
        embedder: OpenAIEmbedder, llm_server: FakeOpenAIServer) -> None:
    ekeep.memory.add(ORG, FACT)  # no quota yet: embedded
    session = ekeep.sessions.create(ORG, Ref("user", 1))
    ekeep.quotas.set(ORG, tokens=3)
    sent = len(llm_server.embedding_requests)
    found = ekeep.memory.recall(session, query="Which invoices need two signatures?")
    assert [m.content for m in found] == [FACT]  # by its words
    assert found.quota_refused is not None and "refused for quota" in found.quota_refused
    assert len(llm_server.embedding_requests) == sent  # nothing left for the query
    assert spent_reserved(ekeep) == (0, 0)

    # In a turn: build_history recalls by words, and history.info says why.
    turn = make_keep(embedder=embedder, config={"memory": {"recall_in_history": True}})
    talk = turn.sessions.get_unscoped(session.id)
    talk.add_user("Which invoices need two signatures?")
    history = turn.compressor.build_history(talk, "Be brief.")
    assert FACT in str(history[0]["content"])
    assert history.info.recall_refused is not None
    assert len(llm_server.embedding_requests) == sent

    ekeep.quotas.set(ORG, tokens=10_000)  # room again: by meaning, reserved and settled
    found = ekeep.memory.recall(session, query="Which invoices need two signatures?")
    assert found.quota_refused is None and [m.content for m in found] == [FACT]
    assert len(llm_server.embedding_requests) == sent + 1
    assert spent_reserved(ekeep) == (reported(llm_server, sent), 0)


def test_an_offline_embedder_reserves_nothing(make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(embedder=HashEmbedder(16))
    keep.quotas.set(ORG, tokens=0)
    keep.memory.add(ORG, FACT)
    assert keep.memory.vector_status(ORG).missing == 0  # type: ignore[union-attr]
    assert spent_reserved(keep) == (0, 0)
