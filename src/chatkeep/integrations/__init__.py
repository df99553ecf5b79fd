"""Thin adapters to agent frameworks, one per framework, one extra each.

- ``openai_agents`` (``chatkeep[agents]``): a ``Session`` for the OpenAI Agents SDK.
- ``pydantic_ai`` (``chatkeep[pydantic-ai]``): a ``ConversationStore`` and a history
  capability for Pydantic AI 2.
- ``langchain`` (``chatkeep[langchain]``): ``ChatkeepMiddleware`` for ``create_agent`` and
  ``ChatkeepStore``, a LangGraph store over chatkeep's memories.

An adapter converts and delegates: every rule (budget, redaction, retraction) lives in
chatkeep's core. Conversations are named by the framework's own key (``session_id``,
``conversation_id``, ``thread_id``) through ``keep.sessions.open``; what a run's context
says about the parties is read once, in :mod:`chatkeep.integrations.context`.
"""
