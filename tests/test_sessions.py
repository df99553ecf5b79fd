"""Sessions, messages and token accounting, on every backend."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import openai
import pytest

from chatkeep import (
    Chatkeep,
    InvalidArgument,
    InvalidMessage,
    InvalidReference,
    InvalidTokens,
    Ref,
    Role,
    SessionClosed,
    SessionNotFound,
    ToolCall,
    Usage,
)
from chatkeep.testing import FakeOpenAIServer, Reply

# PostgreSQL through PgBouncer in transaction mode too (tests/conftest.py).
pytestmark = pytest.mark.pgbouncer

ORG = Ref("organization", 42)


def test_three_references_round_trip_with_int_and_str_ids(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=Ref("organization", 42), actor=Ref("user", "u-7"),
                             subject=Ref("matter", 1001), title="Clause 4")
    again = keep.sessions.get(s.id, tenant=Ref("organization", 42))
    assert again.tenant == Ref("organization", 42) and isinstance(again.tenant.id, int)
    assert again.actor == Ref("user", "u-7") and isinstance(again.actor.id, str)
    assert again.subject == Ref("matter", 1001)
    assert again.title == "Clause 4"
    assert again.anonymize_pii is True

    autonomous = keep.sessions.create(tenant=Ref("workspace", "acme"))
    loaded = keep.sessions.get_unscoped(autonomous.id)
    assert loaded.actor is None and loaded.subject is None


def test_a_job_with_only_the_session_id_finds_the_tenant(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG, actor=Ref("user", 1))
    session_id = s.id  # all a background job receives
    assert keep.sessions.tenant_of(session_id) == ORG
    assert keep.sessions.get_unscoped(session_id).tenant == ORG


def test_wrong_tenant_is_not_found_and_lists_are_scoped(keep: Chatkeep) -> None:
    mine = keep.sessions.create(tenant=ORG, actor=Ref("user", 1))
    theirs = keep.sessions.create(tenant=Ref("organization", 43), actor=Ref("user", 1))
    with pytest.raises(SessionNotFound):
        keep.sessions.get(mine.id, tenant=Ref("organization", 43))
    with pytest.raises(SessionNotFound):
        keep.sessions.get(mine.id, tenant=Ref("team", 42))  # same id, other type
    with pytest.raises(SessionNotFound):
        keep.sessions.get_unscoped("no-such-session")
    assert [s.id for s in keep.sessions.list(ORG)] == [mine.id]
    assert theirs.id not in [s.id for s in keep.sessions.list(ORG, actor=Ref("user", 1))]


def test_session_list_is_most_recent_first(keep: Chatkeep) -> None:
    first = keep.sessions.create(tenant=ORG)
    second = keep.sessions.create(tenant=ORG)
    first.add_user("later activity")
    assert [s.id for s in keep.sessions.list(ORG)][:2] == [first.id, second.id]


def test_messages_keep_order_and_tool_plumbing(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG, actor=Ref("user", 1))
    s.add_user("What does clause 4 mean?")
    s.add_assistant("Let me look it up.", tool_calls=[
        ToolCall("call_1", "lookup_clause", '{"n": 4}'),
        {"id": "call_2", "type": "function",
         "function": {"name": "lookup_party", "arguments": "{}"}},
    ])
    s.add_tool_result("call_1", "Clause 4: termination with 30 days notice.")
    s.add_tool_result("call_2", {"party": "Acme"}, name="lookup_party")
    s.add_assistant("Clause 4 lets either side terminate with 30 days notice.")
    messages = s.messages
    assert [m.seq for m in messages] == [1, 2, 3, 4, 5]
    assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL,
                                          Role.ASSISTANT]
    assert [c.id for c in messages[1].tool_calls] == ["call_1", "call_2"]
    assert messages[1].tool_calls[0].arguments == '{"n": 4}'
    assert messages[2].tool_call_id == "call_1"
    assert json.loads(messages[3].content or "") == {"party": "Acme"}
    assert messages[3].name == "lookup_party"
    assert messages[1].to_openai()["tool_calls"][1]["function"]["name"] == "lookup_party"
    assert all(m.created_at is not None and m.created_at.tzinfo is not None for m in messages)
    assert s.message_count == 5


def test_add_assistant_response_from_the_real_sdk(keep: Chatkeep) -> None:
    with FakeOpenAIServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        server.script(
            Reply.calls(("call_a", "search", '{"q": "clause 4"}'),
                        ("call_b", "fetch", '{"id": 4}'), text="Checking.",
                        prompt_tokens=120, completion_tokens=30),
            Reply.ok("Done.", prompt_tokens=200, completion_tokens=10),
        )
        s = keep.sessions.create(tenant=ORG, actor=Ref("user", 1))
        s.add_user("clause 4?")
        first = client.chat.completions.create(
            model="gpt-4o", messages=keep.compressor.build_history(s, "sys"))
        msg = s.add_assistant_response(first)
        assert msg.content == "Checking."
        assert [c.id for c in msg.tool_calls] == ["call_a", "call_b"]
        s.add_tool_result("call_a", "result a")
        s.add_tool_result("call_b", "result b")
        s.add_assistant_response(client.chat.completions.create(
            model="gpt-4o", messages=keep.compressor.build_history(s, "sys")))
    assert s.total_tokens == 120 + 30 + 200 + 10
    assert keep.repository.usage_sum(s.id) == s.total_tokens
    (line,) = keep.usage(ORG)
    assert (line.purpose, line.model, line.prompt_tokens, line.completion_tokens, line.calls) \
        == ("chat", "gpt-4o", 320, 40, 2)


def test_anthropic_shaped_response_is_read() -> None:
    from chatkeep.formats import read_response

    turn = read_response({
        "type": "message", "model": "claude", "usage": {"input_tokens": 5, "output_tokens": 3},
        "content": [{"type": "text", "text": "Hi"},
                    {"type": "tool_use", "id": "tu_1", "name": "f", "input": {"a": 1}}]})
    assert turn.content == "Hi" and turn.tool_calls[0].id == "tu_1"
    assert turn.usage == Usage(5, 3)


def test_token_accounting_follows_the_ledger(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    assert s.add_tokens(100) == 100
    s.add_assistant("hi", usage=Usage(10, 5), model="m")
    assert s.total_tokens == 115
    assert keep.sessions.get_unscoped(s.id).total_tokens == 115
    assert keep.repository.usage_sum(s.id) == 115
    other = keep.sessions.create(tenant=Ref("organization", 1))
    other.add_tokens(7)
    totals = {(line.tenant, line.purpose): line.total_tokens for line in keep.usage()}
    assert totals == {(ORG, "manual"): 100, (ORG, "chat"): 15,
                      (Ref("organization", 1), "manual"): 7}
    assert keep.usage(ORG, since=datetime.now(UTC) + timedelta(minutes=1)) == []


@pytest.mark.parametrize("bad", [
    lambda s: s.add_message("wizard", "hi"),
    lambda s: s.add_tool_result("call_missing", "x"),
    lambda s: s.add_message(Role.TOOL, "x"),
    lambda s: s.add_user(""),
    lambda s: s.add_user(None),
    lambda s: s.add_assistant(None),
    lambda s: s.add_message(Role.USER, "x", tool_calls=[ToolCall("c", "f")]),
    lambda s: s.add_message(Role.USER, "x", tool_call_id="c"),
    lambda s: s.add_assistant("x", tool_calls=[ToolCall("c", "f"), ToolCall("c", "g")]),
    lambda s: s.add_assistant("x", tool_calls=[{"id": "", "function": {"name": "f"}}]),
])
def test_invalid_messages_raise_and_write_nothing(keep: Chatkeep, bad) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("hello")
    with pytest.raises(InvalidMessage):
        bad(s)
    assert [m.seq for m in keep.sessions.get_unscoped(s.id).messages] == [1]
    assert keep.sessions.get_unscoped(s.id).message_count == 1


def test_a_tool_call_is_answered_once_and_ids_are_unique_per_session(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_assistant(tool_calls=[ToolCall("call_1", "f")])
    s.add_tool_result("call_1", "ok")
    with pytest.raises(InvalidMessage, match="already answered"):
        s.add_tool_result("call_1", "again")
    with pytest.raises(InvalidMessage, match="already used"):
        s.add_assistant(tool_calls=[ToolCall("call_1", "f")])
    other = keep.sessions.create(tenant=ORG)
    with pytest.raises(InvalidMessage, match="no matching"):
        other.add_tool_result("call_1", "cross-session answer")
    assert len(s.messages) == 2 and other.messages == []


def test_bad_tenant_and_tokens_and_closed_sessions(keep: Chatkeep) -> None:
    with pytest.raises(InvalidReference):
        keep.sessions.create(tenant=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidReference):
        keep.sessions.create(tenant=Ref("organization", ""))
    with pytest.raises(InvalidReference):
        keep.sessions.create(tenant=("organization", 1))  # type: ignore[arg-type]
    s = keep.sessions.create(tenant=ORG)
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(InvalidTokens):
            s.add_tokens(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidTokens):
        s.add_assistant("x", usage=Usage(-5, 1))
    assert s.refresh().total_tokens == 0 and s.messages == []
    s.add_user("last words")
    s.close()
    with pytest.raises(SessionClosed):
        s.add_user("after close")
    with pytest.raises(SessionClosed):
        keep.sessions.get_unscoped(s.id).add_user("after close, other handle")
    assert len(s.messages) == 1
    # Tokens spent on a closed session are still billed.
    assert s.add_tokens(3) == 3


def test_anonymize_pii_switch_persists(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG, anonymize_pii=False)
    assert keep.sessions.get_unscoped(s.id).anonymize_pii is False
    s.set_anonymize_pii(True)
    assert keep.sessions.get_unscoped(s.id).anonymize_pii is True


@pytest.mark.sync_api
def test_the_switch_is_stored_by_a_method_not_an_assignment(keep: Chatkeep) -> None:
    """A property does no I/O (STYLE.md): assigning it says which method stores it."""
    s = keep.sessions.create(tenant=ORG)
    with pytest.raises(InvalidArgument, match="set_anonymize_pii"):
        s.anonymize_pii = False  # type: ignore[misc]
    assert keep.sessions.get_unscoped(s.id).anonymize_pii is True


def test_threads_appending_to_one_session_lose_nothing(keep: Chatkeep) -> None:
    from concurrent.futures import ThreadPoolExecutor

    s = keep.sessions.create(tenant=ORG)

    def writer(worker: int) -> None:
        handle = keep.sessions.get_unscoped(s.id)
        for i in range(40):
            handle.add_user(f"w{worker}-{i}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))
    messages = s.messages
    assert [m.seq for m in messages] == list(range(1, 161))
    assert sorted(m.content for m in messages) == sorted(
        f"w{w}-{i}" for w in range(4) for i in range(40))
    for w in range(4):  # each writer's own messages stay in its order
        mine = [int((m.content or "").split("-")[1]) for m in messages
                if (m.content or "").startswith(f"w{w}-")]
        assert mine == sorted(mine)
