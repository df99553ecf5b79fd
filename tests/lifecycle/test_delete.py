"""Deleting a conversation removes every row holding its content (the bytes too), keeps
the bill, and refuses another tenant's id and a second delete; the purges a framework's
delete calls (``delete_last``, ``clear``) remove bytes and keep the history's rules."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lifecycle_helpers import ANN, CASE, T1, T2, label, on_disk, plant, usage_totals

from chatkeep import Chatkeep, Ref, SessionNotFound, ToolCall, Usage


@pytest.mark.pgbouncer
def test_deleting_a_session_removes_its_content_and_keeps_the_bill(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    world = plant(db_url)
    keep = make_keep()
    target = world.sessions[label(T1, ANN, None)]
    mine = world.canaries[label(T1, ANN, None)] + [world.memories[f"valued {T1}"].split()[-1]]
    assert on_disk(db_url, mine) == mine
    bill, lines = usage_totals(db_url), keep.usage(T1)
    with pytest.raises(SessionNotFound):  # another tenant's id, as get
        keep.sessions.delete(target, T2)

    counts = keep.sessions.delete(target, T1, by="support")

    assert counts == {"sessions": 1, "messages": 5, "tool_calls": 1, "folds": 1,
                      "summaries": 1, "vaults": 1, "memories": 1, "vectors": counts["vectors"],
                      "usage_unlinked": 1, "memories_unlinked": 1}
    assert on_disk(db_url, mine) == []
    others = [c for o, cs in world.canaries.items() if o != label(T1, ANN, None) for c in cs]
    assert on_disk(db_url, others) == others
    assert usage_totals(db_url) == bill and keep.usage(T1) == lines
    with pytest.raises(SessionNotFound):
        keep.sessions.get(target, T1)
    with pytest.raises(SessionNotFound):  # a second delete: no half-state, just not found
        keep.sessions.delete(target, T1)
    contents = {m.content for m in keep.memory.list(T1)}
    assert world.memories[f"plain {T1}"] in contents  # none of her values: kept, unlinked
    assert world.memories[f"valued {T1}"] not in contents
    assert world.memories[f"personal {T1} {ANN}"] in contents  # not from this conversation
    assert keep.sessions.get(world.sessions[label(T1, ANN, CASE)], T1).message_count == 5
    [entry, *_] = keep.lifecycle.log(T1)
    assert (entry["action"], entry["scope_id"], entry["actor_by"]) == (
        "delete_session", target, "support")
    assert entry["counts"]["messages"] == 5


def _tool_turn(keep: Chatkeep) -> object:
    session = keep.sessions.create(Ref("org", 5), Ref("user", 1))
    session.add_user("look up zqpurgeuserqz")
    session.add_assistant(tool_calls=[ToolCall("c1", "lookup", '{"q": "zqpurgeargsqz"}')],
                          usage=Usage(prompt_tokens=4, completion_tokens=2))
    session.add_tool_result("c1", "zqpurgeresultqz")
    session.add_assistant("zqpurgeanswerqz")
    return session


def test_delete_last_removes_the_bytes_and_keeps_seqs_gapless(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    session = _tool_turn(keep)
    assert session.delete_last() == 4  # type: ignore[attr-defined]
    assert session.delete_last() == 3  # type: ignore[attr-defined]
    assert [m.seq for m in session.messages] == [1, 2]  # type: ignore[attr-defined]
    assert session.message_count == 2  # type: ignore[attr-defined]
    assert on_disk(db_url, ["zqpurgeanswerqz", "zqpurgeresultqz"]) == []
    # The call is open again: its result may be recorded anew, at the next seq.
    again = session.add_tool_result("c1", "retried")  # type: ignore[attr-defined]
    assert again.seq == 3
    assert keep.usage(Ref("org", 5))[0].prompt_tokens == 4


def test_delete_last_of_a_folded_message_drops_the_summary(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    session = keep.sessions.create(Ref("org", 5))
    session.add_user("zqfoldedqz")
    row = session.refresh().row
    assert keep.repository.compare_and_set_summary(session.id, row.summary_version,
                                                   "summary of zqfoldedqz", 1) is not None
    assert session.delete_last() == 1
    session.refresh()
    assert session.summary is None and session.summary_watermark == 0
    assert on_disk(db_url, ["zqfoldedqz"]) == []


def test_clear_removes_every_message_summary_and_vault(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep()
    session = _tool_turn(keep)
    assert keep.repository.compare_and_set_vault(session.id, 0, "sealed zqpurgevaultqz")
    assert session.clear() == 4  # type: ignore[attr-defined]
    assert session.messages == [] and session.summary is None  # type: ignore[attr-defined]
    assert keep.repository.read_vault(session.id)[0] is None  # type: ignore[attr-defined]
    assert on_disk(db_url, ["zqpurgeuserqz", "zqpurgeargsqz", "zqpurgeresultqz",
                            "zqpurgeanswerqz", "zqpurgevaultqz"]) == []
    assert session.add_user("fresh").seq == 1  # type: ignore[attr-defined]
    assert keep.usage(Ref("org", 5))[0].prompt_tokens == 4  # billed all the same


def test_with_keep_retracted_text_the_purges_retract_for_audit(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(config={"privacy": {"keep_retracted_text": True}})
    session = _tool_turn(keep)
    assert session.delete_last() == 4  # type: ignore[attr-defined]
    kept = session.messages  # type: ignore[attr-defined]
    assert len(kept) == 4 and kept[-1].retracted_at is not None
    assert session.clear() == 3  # type: ignore[attr-defined]
    assert all(m.retracted_at is not None for m in session.messages)  # type: ignore[attr-defined]
    assert on_disk(db_url, ["zqpurgeanswerqz"]) == ["zqpurgeanswerqz"]


def test_delete_checks_its_arguments(keep: Chatkeep) -> None:
    from chatkeep import InvalidReference

    with pytest.raises(InvalidReference):
        keep.sessions.delete("x", None)  # type: ignore[arg-type]
    with pytest.raises(SessionNotFound):
        keep.sessions.delete("no-such-session", Ref("org", 1))




def test_a_job_queued_before_the_delete_finds_nothing_and_is_done(
        db_url: str, openai_client: object) -> None:
    from chatkeep.memory import DISTIL_JOB

    keep = Chatkeep(db_url, model=openai_client)
    session = keep.sessions.create(Ref("org", 5), Ref("user", 1))
    session.add_user("zqqueuedqz")
    keep.sessions.delete(session.id, Ref("org", 5))
    with pytest.raises(SessionNotFound):  # what the job would have raised, and retried
        keep.memory.run_job(session.id)
    keep.job_handlers()[DISTIL_JOB](session.id)  # the worker's handler: done, no retry
    keep.close()
