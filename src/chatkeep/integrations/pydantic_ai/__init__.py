"""Pydantic AI 2 on chatkeep (``pip install 'chatkeep[pydantic-ai]'``).

* :class:`ChatkeepConversationStore`: Pydantic AI's ``ConversationStore``. A conversation
  is the tenant's session named by its ``conversation_id``; it loads exactly as it was
  saved, each response's usage is billed to the tenant, and ``scope`` is the tenant.
* :class:`ChatkeepHistory`: a capability that sends, with every model request, chatkeep's
  budgeted history of the stored conversation (the summary as a ``CompactionPart``, the
  open turn exactly as recorded) followed by the run's own messages, all through the
  session's egress.

    keep = AsyncChatkeep("sqlite:///chat.db")
    store = ChatkeepConversationStore(keep, tenant=Ref("organization", 7))
    agent = Agent(model, capabilities=[ChatkeepHistory(store)])

    conversation = await store.load(chat_id) or Conversation(conversation_id=chat_id)
    result = await agent.run(prompt, conversation=conversation)
    await store.save(result)
"""

from __future__ import annotations

try:
    import pydantic_ai.conversation_store  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is in the dev set
    exc.msg = (f"{exc.msg}: chatkeep.integrations.pydantic_ai needs Pydantic AI 2.78 or "
               "later: pip install 'chatkeep[pydantic-ai]'")
    raise

from chatkeep.integrations.pydantic_ai._request import PreparedRequest
from chatkeep.integrations.pydantic_ai.capability import ChatkeepHistory
from chatkeep.integrations.pydantic_ai.store import ChatkeepConversationStore

__all__ = ["ChatkeepConversationStore", "ChatkeepHistory", "PreparedRequest"]
