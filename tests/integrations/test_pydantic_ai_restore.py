"""Pydantic AI: the user's own values back (issue 30 item 10), at the model boundary.

Every streamed chunk the application is shown is restored, the first chunk of a text part
included (``run_stream`` shows it from the response it accumulates, before any capability
sees an event), a placeholder cut at any offset coming back whole; function tools receive
the real values; the provider only ever sees placeholders. Pydantic AI's own
``OpenAIChatModel`` runs against the strict fake Chat Completions server, which streams a
reply in three equal chunks (``chatkeep.testing.fake_openai.pieces``): the reply's length
and the placeholder's place choose where the chunks cut it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from streaming_runs import store_result, streamed_turn

from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.pydantic_ai import ChatkeepConversationStore, ChatkeepHistory
from chatkeep.integrations.pydantic_ai._restoring import PlaceholderRestorer
from chatkeep.testing import FakeOpenAIServer, Reply
from chatkeep.testing.fake_openai import pieces

ORG = Ref("organization", 1)
EMAIL = "ana.garcia@example.com"
PLACEHOLDER = "<EMAIL_1>"
PRIVACY = {"privacy": {"anonymize_pii": True}}
MODES = ["run_stream", "iter", "run_stream_events"]


def chat_model(server: FakeOpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=server.base_url,
                                                             api_key="k"))


def cut_reply(chunk: int, at: int) -> str:
    """A reply of three chunks of ``chunk`` characters whose placeholder starts at ``at``
    (so the chunk boundaries at ``chunk`` and ``2 * chunk`` fall where they fall)."""
    text = "x" * at + PLACEHOLDER
    text += "y" * (3 * chunk - len(text))
    assert len(text) == 3 * chunk and pieces(text)[0] == text[:chunk]
    return text


def cases() -> list[str]:
    """Every cut of the placeholder by the first chunk's end (the placeholder at the start
    of the reply, and later in it), and by the second chunk's end."""
    replies = [cut_reply(offset, 0) for offset in range(3, len(PLACEHOLDER))]  # at 0
    for offset in range(1, len(PLACEHOLDER)):
        replies.append(cut_reply(5 + offset, 5))          # the first chunk cuts it
        replies.append(cut_reply(12, 24 - offset))        # the second chunk cuts it
    assert all(any(start < cut < start + len(PLACEHOLDER)
                   for cut in (len(r) // 3, 2 * len(r) // 3))
               for r in replies for start in [r.index("<")])
    return replies


@pytest.mark.parametrize("mode", MODES)
def test_every_cut_of_a_placeholder_is_restored_in_every_chunk_shown(
        db_url: str, mode: str) -> None:
    """Each reply streams a placeholder cut at another offset, by the end of the first
    chunk (which ``run_stream`` shows from its own copy) or of a later one: what the app
    is shown, joined, is the reply with the real value, no chunk holds a piece of a
    placeholder, and the response Pydantic AI keeps and the output are restored."""
    replies = cases()

    async def scenario(server: FakeOpenAIServer) -> list[list[str]]:
        shown_chunks: list[list[str]] = []
        async with AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server),
                                           capabilities=[ChatkeepHistory(store)])
            for reply in replies:
                server.script(Reply.ok(reply))
                chunks: list[str] = []
                saved, shown = await streamed_turn(mode, agent, store, "cut",
                                                   f"Write to {EMAIL}", chunks)
                expected = reply.replace(PLACEHOLDER, EMAIL)
                assert shown == expected, (reply, chunks)
                result = store_result(saved)
                assert result.output == expected
                response = result.all_messages()[-1]
                assert isinstance(response, ModelResponse)
                assert response.parts == [TextPart(expected)]
                shown_chunks.append(chunks)
        return shown_chunks

    with FakeOpenAIServer() as server:
        shown_chunks = asyncio.run(scenario(server))
        sent = "\n".join(server.bodies())
        assert not server.rejected, server.rejected
    assert EMAIL not in sent and PLACEHOLDER in sent
    for chunks in shown_chunks:
        for chunk in chunks:
            assert "<" not in chunk and "_1>" not in chunk, chunks


def test_the_sync_keep_restores_run_stream_from_the_first_chunk(db_url: str) -> None:
    """The same on a sync ``Chatkeep`` (a script's store): the first chunk cut inside the
    placeholder is held back, then shown whole."""
    reply = cut_reply(4, 0)  # "<EMA" | "IL_1" | ">yyy"

    async def scenario(server: FakeOpenAIServer) -> str:
        keep = Chatkeep(db_url, config=PRIVACY, dispatcher="inline")
        try:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server),
                                           capabilities=[ChatkeepHistory(store)])
            server.script(Reply.ok(reply))
            chunks: list[str] = []
            _, shown = await streamed_turn("run_stream", agent, store, "s",
                                           f"I am {EMAIL}", chunks)
            assert chunks == [f"{EMAIL}yyy"], chunks  # "<EMA" and "IL_1" held back
            return shown
        finally:
            keep.close()

    with FakeOpenAIServer() as server:
        assert asyncio.run(scenario(server)) == f"{EMAIL}yyy"
        assert EMAIL not in "\n".join(server.bodies())


def test_restore_output_off_leaves_the_stream_as_written(db_url: str) -> None:
    reply = cut_reply(4, 0)

    async def scenario(server: FakeOpenAIServer) -> str:
        async with AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server), capabilities=[
                ChatkeepHistory(store, restore_output=False)])
            server.script(Reply.ok(reply))
            saved, shown = await streamed_turn("run_stream", agent, store, "off",
                                               f"I am {EMAIL}")
            assert store_result(saved).output == reply
            return shown

    with FakeOpenAIServer() as server:
        assert asyncio.run(scenario(server)) == reply


def test_a_session_that_does_not_redact_streams_each_chunk_as_it_comes(db_url: str) -> None:
    """Nothing to restore: no chunk is held back (a ``<`` tail is shown at once)."""
    reply = cut_reply(4, 0)

    async def scenario(server: FakeOpenAIServer) -> list[str]:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG, anonymize_pii=False)
            agent: Agent[Any, Any] = Agent(chat_model(server),
                                           capabilities=[ChatkeepHistory(store)])
            server.script(Reply.ok(reply))
            chunks: list[str] = []
            await streamed_turn("run_stream", agent, store, "plain", "hi", chunks)
            return chunks

    with FakeOpenAIServer() as server:
        assert asyncio.run(scenario(server)) == pieces(reply)


def test_the_restorer_composes_and_never_overlaps_a_snapshot_with_its_deltas() -> None:
    """What the parts manager's snapshot shows plus the deltas after it is the restored
    text, whatever the cut; the inner restorer (Pydantic AI's own) runs first."""
    from pydantic_ai._special_tokens import StreamRestorer as Inner
    from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPartDelta

    def restore(text: str) -> str:
        return text.replace(PLACEHOLDER, EMAIL)

    text = "Hi <EMAIL_1>, bye <EMAIL_1>"
    for cut in range(1, len(text)):
        restorer = PlaceholderRestorer(restore, Inner())
        first = restorer.restore(PartStartEvent(index=0, part=TextPart(text[:cut])))
        assert isinstance(first, PartStartEvent) and isinstance(first.part, TextPart)
        snapshot = restorer.restore_part_so_far(0, TextPart(text[:cut]))
        assert snapshot.content == first.part.content
        later = restorer.restore(PartDeltaEvent(index=0, delta=TextPartDelta(text[cut:])))
        assert isinstance(later, PartDeltaEvent) and isinstance(later.delta, TextPartDelta)
        tail = "".join(e.delta.content_delta for e in restorer.flush()
                       if isinstance(e.delta, TextPartDelta))
        assert snapshot.content + later.delta.content_delta + tail == restore(text)


# -- item 2: function tools get the real values -------------------------------------------


class Letter(BaseModel):
    to: str
    cc: list[str]


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_function_tool_receives_the_real_values(db_url: str, kind: str) -> None:
    """A tool the model calls with placeholders gets the user's values (plain and nested
    arguments); its result goes back through the egress; the server never receives the
    value raw (every byte it received is scanned); ``restore_tool_args=False`` hands the
    tool the model's arguments; the call in Pydantic AI's messages keeps them too."""
    received: list[Any] = []

    async def scenario(server: FakeOpenAIServer) -> None:
        keep: Chatkeep | AsyncChatkeep = (
            AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") if kind == "async"
            else Chatkeep(db_url, config=PRIVACY, dispatcher="inline"))
        try:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            for restore in (True, False):
                agent: Agent[Any, Any] = Agent(chat_model(server), capabilities=[
                    ChatkeepHistory(store, restore_tool_args=restore)])

                @agent.tool_plain
                def send(to: str, letter: Letter) -> str:
                    """Send a letter."""
                    received.append((to, letter.to, letter.cc))
                    return f"sent to {to}"

                server.script(
                    Reply.calls(("c1", "send", '{"to": "<EMAIL_1>", "letter": {"to": '
                                 '"<EMAIL_1>", "cc": ["<EMAIL_1>", "me"]}}')),
                    Reply.ok("Sent to <EMAIL_1>."))
                result = await agent.run(f"Write to {EMAIL}",
                                         conversation=await store.for_run(f"t{restore}"))
                assert result.output == f"Sent to {EMAIL}."
                call = result.all_messages()[1]
                assert isinstance(call, ModelResponse)
                assert isinstance(call.parts[0], ToolCallPart)
                assert call.parts[0].args_as_dict()["to"] == PLACEHOLDER
                await store.save(result)
        finally:
            if isinstance(keep, AsyncChatkeep):
                await keep.close()
            else:
                keep.close()

    with FakeOpenAIServer() as server:
        asyncio.run(scenario(server))
        assert not server.rejected, server.rejected
        sent = "\n".join(server.bodies())
    assert received == [(EMAIL, EMAIL, [EMAIL, "me"]),
                        (PLACEHOLDER, PLACEHOLDER, [PLACEHOLDER, "me"])]
    assert EMAIL not in sent and EMAIL.casefold() not in sent.casefold()
    assert "sent to <EMAIL_1>" in sent  # the tool's result, through the egress
