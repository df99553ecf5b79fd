"""Framework deletes delete (issue 36 item 2): the Agents SDK's ``pop_item`` and
``clear_session`` remove the bytes, as the SDK's own sessions do; keeping retracted text
for audit is an explicit option (``privacy.keep_retracted_text``), off by default."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lifecycle_helpers import on_disk

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession

ORG = Ref("organization", 9)
POPPED = "canary-popped-agents-item"
CLEARED = "canary-cleared-agents-item"
KEPT = "canary-kept-agents-item"


def items(*texts: str) -> list[Any]:
    return [{"role": "user", "content": text} for text in texts]


def scenario(db_url: str, config: dict[str, Any]) -> tuple[Any, list[Any]]:
    async def main() -> tuple[Any, list[Any]]:
        async with AsyncChatkeep(db_url, config=config) as keep:
            popping = await ChatkeepSession.open(keep, tenant=ORG, session_id="pop")
            await popping.add_items(items(KEPT, POPPED))
            popped = await popping.pop_item()
            clearing = await ChatkeepSession.open(keep, tenant=ORG, session_id="clear")
            await clearing.add_items(items(CLEARED))
            await clearing.clear_session()
            return popped, await popping.get_items()
    return asyncio.run(main())


@pytest.mark.sync_api
def test_pop_item_and_clear_session_leave_no_bytes(db_url: str) -> None:
    popped, left = scenario(db_url, {})
    assert popped == items(POPPED)[0]
    assert left == items(KEPT)
    assert on_disk(db_url, [POPPED, CLEARED, KEPT]) == [KEPT]


@pytest.mark.sync_api
def test_keeping_retracted_text_for_audit_is_an_explicit_option(db_url: str) -> None:
    popped, left = scenario(db_url, {"privacy": {"keep_retracted_text": True}})
    assert popped == items(POPPED)[0] and left == items(KEPT)
    assert sorted(on_disk(db_url, [POPPED, CLEARED, KEPT])) == sorted([POPPED, CLEARED, KEPT])


@pytest.mark.sync_api
def test_a_pydantic_ai_store_delete_leaves_no_bytes(db_url: str) -> None:
    """``ChatkeepConversationStore.delete`` removes the conversation's messages, as
    Pydantic AI's own stores do; the session (and its billed usage) stays."""
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from chatkeep.integrations.pydantic_ai import ChatkeepConversationStore, ChatkeepHistory

    secret = "canary-pydantic-deleted-conversation"
    kept = "canary-pydantic-kept-conversation"

    async def main() -> None:
        async with AsyncChatkeep(db_url) as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent = Agent(TestModel(custom_output_text="noted"),
                          capabilities=[ChatkeepHistory(store)])
            for key, text in (("gone", secret), ("kept", kept)):
                conversation = await store.for_run(key)
                result = await agent.run(text, conversation=conversation)
                await store.save(result)
            await store.delete("gone")
            assert await store.load("gone") is None

    asyncio.run(main())
    assert on_disk(db_url, [secret, kept]) == [kept]


@pytest.mark.sync_api
def test_a_langgraph_store_delete_leaves_no_bytes(db_url: str) -> None:
    """``ChatkeepStore.delete`` (a put of ``None``) erases the memory, its earlier
    versions and its text-index entries, as LangGraph's own stores delete."""
    from chatkeep import Chatkeep
    from chatkeep.integrations.langchain import ChatkeepStore

    secret, kept = "canary-langgraph-deleted-memory", "canary-langgraph-kept-memory"
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep)
        namespace = ("organization:9", "tenant")
        store.put(namespace, "new", {"content": f"first draft {secret}"})
        item = store.search(namespace)[0]
        store.put(namespace, item.key, {"content": f"second draft {secret}"})
        store.put(namespace, "other", {"content": kept})
        current = next(i for i in store.search(namespace) if secret in i.value["content"])
        store.delete(namespace, current.key)
        assert [i.value["content"] for i in store.search(namespace)] == [kept]
    assert on_disk(db_url, [secret, kept]) == [kept]
