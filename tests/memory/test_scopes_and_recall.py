"""Scopes (tenant / subject / personal), recall ranking, history injection, forget."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import openai
import pytest
from memory_helpers import (
    ALICE,
    BOB,
    MATTER,
    ORG,
    OTHER_MATTER,
    OTHER_ORG,
    Player,
    contents,
    remember,
    talk,
)
from sqlalchemy import inspect, text

from chatkeep import Chatkeep, InvalidArgument, Ref
from chatkeep.memory import Scope

# -- 3. scopes -------------------------------------------------------------------------------


def test_each_fact_lands_in_its_scope(mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, s, ("tenant", "Drafts need partner review."),
             ("subject", "M-100 is a lease dispute."), ("personal", "Prefers bullets."))
    by_scope = {m.scope: m for m in mkeep.memory.list(ORG)}
    assert by_scope["tenant"].subject is None and by_scope["tenant"].actor is None
    assert by_scope["subject"].subject == MATTER and by_scope["subject"].actor is None
    assert by_scope["personal"].actor == ALICE and by_scope["personal"].subject is None
    assert all(m.tenant == ORG and m.source_session_id == s.id for m in by_scope.values())


def test_a_session_without_actor_never_writes_or_reads_personal_memories(
        mkeep: Chatkeep, player: Player) -> None:
    alice = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, alice, ("personal", "Prefers bullets."))
    robot = mkeep.sessions.create(ORG, None, MATTER)
    talk(robot, "Nightly run: the hearing is on 14 March.", "Logged.")
    player.will_extract(("personal", "Likes nightly runs."),
                        ("subject", "The M-100 hearing is on 14 March."))
    result = mkeep.memory.distil(robot.id)
    assert (result.added, result.dropped) == (1, 1)
    prompt = player.extractions[-1]["messages"][0]["content"]
    assert '"personal" is not available' in prompt
    assert contents(mkeep.memory.recall(robot)) == ["The M-100 hearing is on 14 March."]
    assert contents(mkeep.memory.recall(robot, query="bullets")) == []
    assert "Prefers bullets." in contents(mkeep.memory.recall(alice))


def test_a_subject_fact_without_a_subject_is_dropped_not_widened(
        mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    talk(s, "The client will settle for 40k.", "Noted.")
    player.will_extract(("subject", "The client will settle for 40,000."),
                        ("tenant", "Settlements need partner sign-off."))
    result = mkeep.memory.distil(s.id)
    assert (result.added, result.dropped) == (1, 1)
    assert '"subject" is not available' in player.extractions[0]["messages"][0]["content"]
    assert contents(mkeep.memory.list(ORG)) == ["Settlements need partner sign-off."]


def test_no_memory_crosses_tenants_subjects_or_actors(mkeep: Chatkeep, player: Player) -> None:
    sessions = {
        (tenant, actor, subject): mkeep.sessions.create(tenant, actor, subject)
        for tenant, actor, subject in itertools.product(
            (ORG, OTHER_ORG), (ALICE, BOB, None), (MATTER, OTHER_MATTER, None))}
    for (tenant, actor, subject), s in sessions.items():
        tag = f"{tenant.id}-{actor.id if actor else 'none'}-{subject.id if subject else 'none'}"
        remember(mkeep, player, s, ("tenant", f"policy shared fact {tag}"),
                 ("subject", f"record shared fact {tag}"),
                 ("personal", f"person shared fact {tag}"))
    everything = [m for t in (ORG, OTHER_ORG) for m in mkeep.memory.list(t, limit=1000)]
    # Per tenant: 9 tenant facts, 6 subject (sessions with a subject), 6 personal (an actor).
    assert len(everything) == 2 * (9 + 6 + 6)
    for (tenant, actor, subject), s in sessions.items():
        for query in (None, "shared fact"):
            for m in mkeep.memory.recall(s, query=query, limit=1000):
                assert m.tenant == tenant
                if m.scope == "subject":
                    assert subject is not None and m.subject == subject
                if m.scope == "personal":
                    assert actor is not None and m.actor == actor
        # and everything that applies is found
        expected = [m for m in everything if m.tenant == tenant and (
            m.scope == "tenant" or (m.scope == "subject" and m.subject == subject)
            or (m.scope == "personal" and actor is not None and m.actor == actor))]
        assert sorted(contents(mkeep.memory.recall(s, limit=1000))) == sorted(contents(expected))


# -- 7. recall -------------------------------------------------------------------------------


def test_recall_ranks_by_relevance_then_recency(mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, s, ("subject", "The hearing for the lease dispute is in March."))
    remember(mkeep, player, s, ("tenant", "Invoices are sent monthly."))
    remember(mkeep, player, s, ("subject", "The lease break clause needs six months notice."))
    remember(mkeep, player, s, ("personal", "Prefers short lease summaries."))
    ranked = contents(mkeep.memory.recall(s, query="lease break clause notice"))
    assert ranked[0] == "The lease break clause needs six months notice."
    assert "Invoices are sent monthly." not in ranked
    assert set(ranked[1:]) == {"The hearing for the lease dispute is in March.",
                               "Prefers short lease summaries."}
    # Equal relevance: the newer first.
    tie = mkeep.memory.recall(s, query="lease")
    assert [m.score for m in tie] == sorted((m.score for m in tie), reverse=True)
    # No query: most recent first; limit applies.
    assert contents(mkeep.memory.recall(s, limit=2)) == [
        "Prefers short lease summaries.", "The lease break clause needs six months notice."]
    assert mkeep.memory.recall(s, query="hearing")[0].score is not None
    assert mkeep.memory.recall(s, query="the of and") == mkeep.memory.recall(s)  # stopwords only


@pytest.mark.sync_api  # inspects the engine directly
def test_recall_is_served_by_a_text_index(keep: Chatkeep) -> None:
    keep.start()  # the schema is made on first use; this test reads the engine directly
    with keep.engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            assert "memories_fts" in inspect(conn).get_table_names()
        else:
            (definition,) = conn.execute(text(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memories_content_fts' "
                "AND schemaname = current_schema()")).scalars()
            assert "gin" in definition.lower() and "to_tsvector" in definition


def test_recall_query_syntax_is_never_an_error(mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    remember(mkeep, player, s, ("tenant", "Quotes are in EUR."))
    for query in ('"unbalanced', "a AND OR NOT", "NEAR(x y)", "-minus *star", "'; drop", "€ ü"):
        mkeep.memory.recall(s, query=query)
    assert contents(mkeep.memory.recall(s, query='quotes" OR (')) == ["Quotes are in EUR."]


def test_recalled_memories_go_into_the_system_message_when_asked(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI,
        player: Player) -> None:
    keep = make_keep(model=openai_client, config={"memory": {"recall_in_history": True}})
    s = keep.sessions.create(ORG, ALICE, MATTER)
    remember(keep, player, s, ("subject", "The M-100 hearing is on 2 April."),
             ("personal", "Prefers bullet points."))
    other = keep.sessions.create(ORG, BOB)
    s.add_user("When is the hearing?")
    system = keep.compressor.build_history(s, "You are helpful.")[0]["content"]
    assert system.startswith("You are helpful.")
    assert "- The M-100 hearing is on 2 April." in system
    assert "- Prefers bullet points." in system
    other.add_user("When is the hearing?")
    assert keep.compressor.build_history(other, "You are helpful.")[0]["content"] == \
        "You are helpful."
    off = make_keep(model=openai_client)
    assert off.compressor.memory_provider is None


# -- 8. forget -------------------------------------------------------------------------------


def test_forget_an_actor_deletes_only_their_personal_memories(
        mkeep: Chatkeep, player: Player) -> None:
    alice = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, alice, ("personal", "Alice prefers tea."),
             ("tenant", "Offices close at six."), ("subject", "M-100 is a lease dispute."))
    remember(mkeep, player, alice, ("personal", "Alice prefers coffee."))
    bob = mkeep.sessions.create(ORG, BOB)
    remember(mkeep, player, bob, ("personal", "Bob prefers tea."))
    elsewhere = mkeep.sessions.create(OTHER_ORG, ALICE)
    remember(mkeep, player, elsewhere, ("personal", "Alice at org 2 likes jazz."))

    assert mkeep.memory.forget(ORG, actor=ALICE) == 2
    assert contents(mkeep.memory.recall(alice, query="prefers tea coffee")) == []
    assert sorted(contents(mkeep.memory.list(ORG))) == [
        "Bob prefers tea.", "M-100 is a lease dispute.", "Offices close at six."]
    assert contents(mkeep.memory.list(OTHER_ORG)) == ["Alice at org 2 likes jazz."]
    assert mkeep.memory.forget(ORG, actor=ALICE) == 0


def test_forget_a_whole_tenant(mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, s, ("personal", "Prefers tea."), ("tenant", "Close at six."))
    t = mkeep.sessions.create(OTHER_ORG, ALICE)
    remember(mkeep, player, t, ("tenant", "Close at five."))
    assert mkeep.memory.forget(ORG, whole_tenant=True) == 2
    assert mkeep.memory.recall(s, query="close six tea") == []
    assert contents(mkeep.memory.list(OTHER_ORG)) == ["Close at five."]
    with pytest.raises(InvalidArgument):
        mkeep.memory.forget(ORG)
    with pytest.raises(InvalidArgument):
        mkeep.memory.forget(ORG, actor=ALICE, whole_tenant=True)


def test_list_filters(mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, s, ("personal", "Prefers tea."), ("subject", "M-100 is open."))
    assert contents(mkeep.memory.list(ORG, scope=Scope.PERSONAL)) == ["Prefers tea."]
    assert contents(mkeep.memory.list(ORG, subject=MATTER)) == ["M-100 is open."]
    assert contents(mkeep.memory.list(ORG, actor=ALICE)) == ["Prefers tea."]
    assert mkeep.memory.list(Ref("organization", 99)) == []
