"""Duplicates and contradictions: the cheap normalised check, then ADD/UPDATE/DELETE/NONE."""

from __future__ import annotations

from typing import Any

from memory_helpers import ALICE, BOB, MATTER, ORG, Player, contents, remember, talk

from chatkeep import Chatkeep
from chatkeep.memory.prompts import DECIDE_SYSTEM


def test_a_normalised_restatement_is_skipped_without_asking_the_model(
        mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, s, ("tenant", "All drafts need partner review."))
    talk(s, "reminder", "ok")
    player.will_extract(("tenant", "  all DRAFTS need partner-review!! "),
                        ("tenant", "All drafts need partner review."))
    result = mkeep.memory.distil(s.id)
    assert (result.added, result.duplicates, result.model_calls) == (0, 2, 1)
    assert player.decisions == []
    assert len(mkeep.memory.list(ORG, include_superseded=True)) == 1


def test_the_same_text_in_another_scope_is_not_a_duplicate(mkeep: Chatkeep,
                                                           player: Player) -> None:
    alice = mkeep.sessions.create(ORG, ALICE)
    bob = mkeep.sessions.create(ORG, BOB)
    remember(mkeep, player, alice, ("personal", "Prefers tea."))
    remember(mkeep, player, bob, ("personal", "Prefers tea."))
    assert [m.actor for m in mkeep.memory.list(ORG)] == [BOB, ALICE]


def test_model_says_none_for_a_paraphrase(mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    remember(mkeep, player, s, ("tenant", "Refunds over $500 need manager approval."))
    player.decide = lambda facts: [{"fact": 0, "event": "NONE", "target": "m1"}]
    remember(mkeep, player, s, ("tenant", "Any refund above 500 dollars needs a manager."))
    (asked,) = player.decisions
    assert asked == [{"fact": 0, "text": "Any refund above 500 dollars needs a manager.",
                      "memories": [{"id": "m1",
                                    "text": "Refunds over $500 need manager approval."}]}]
    assert contents(mkeep.memory.list(ORG, include_superseded=True)) == [
        "Refunds over $500 need manager approval."]


def test_a_contradiction_supersedes_the_old_memory(mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, s, ("subject", "The M-100 hearing is on 14 March."))
    old = mkeep.memory.list(ORG)[0]
    player.decide = lambda facts: [{"fact": 0, "event": "DELETE", "target": "m1"}]
    other = mkeep.sessions.create(ORG, BOB, MATTER)
    remember(mkeep, player, other, ("subject", "The M-100 hearing moved to 2 April."))
    (new,) = mkeep.memory.list(ORG)
    assert new.content == "The M-100 hearing moved to 2 April."
    history = {m.id: m for m in mkeep.memory.list(ORG, include_superseded=True)}
    assert history[old.id].superseded_by == new.id
    assert contents(mkeep.memory.recall(s, query="hearing")) == [new.content]


def test_an_update_stores_the_merged_text_and_links_the_old_row(
        mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    remember(mkeep, player, s, ("personal", "Is an engineering manager."))
    player.decide = lambda facts: [{"fact": 0, "event": "UPDATE", "target": "m1",
                                    "text": "Is the engineering manager of navigation."}]
    result_before = len(player.decisions)
    remember(mkeep, player, s, ("personal", "Manages the navigation team."))
    assert len(player.decisions) == result_before + 1
    (live,) = mkeep.memory.list(ORG)
    assert live.content == "Is the engineering manager of navigation."
    rows = mkeep.memory.list(ORG, include_superseded=True)
    assert [r.superseded_by for r in rows if r.id != live.id] == [live.id]


def test_candidates_come_from_the_facts_own_scope_only(mkeep: Chatkeep,
                                                        player: Player) -> None:
    alice = mkeep.sessions.create(ORG, ALICE, MATTER)
    remember(mkeep, player, alice, ("personal", "Prefers memos in bullets."),
             ("subject", "Memos for M-100 go to the client weekly."))
    bob = mkeep.sessions.create(ORG, BOB)
    asked: list[Any] = []

    def decide(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        asked.extend(facts)
        return [{"fact": f["fact"], "event": "ADD"} for f in facts]

    player.decide = decide
    remember(mkeep, player, bob, ("personal", "Prefers memos in prose."),
             ("tenant", "Memos use the firm template."))
    assert asked == []  # nothing in Bob's personal scope or the tenant scope yet
    assert len(mkeep.memory.list(ORG)) == 4


def test_a_delete_of_an_already_superseded_target_keeps_the_new_fact(
        mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    remember(mkeep, player, s, ("tenant", "Invoices go out monthly."))
    player.decide = lambda facts: [{"fact": f["fact"], "event": "DELETE", "target": "m1"}
                                   for f in facts]
    remember(mkeep, player, s, ("tenant", "Invoices go out weekly."),
             ("tenant", "Invoices go out daily."))
    live = contents(mkeep.memory.list(ORG))
    assert sorted(live) == ["Invoices go out daily.", "Invoices go out weekly."]


def test_decision_prompt_is_documented_mem0_style() -> None:
    for word in ('"ADD"', '"UPDATE"', '"DELETE"', '"NONE"', '"target"', "JSON"):
        assert word in DECIDE_SYSTEM
