"""Thin adapters to agent frameworks, one module per framework, one extra each.

``chatkeep.integrations.openai_agents`` (``pip install 'chatkeep[agents]'``): a
``Session`` for the OpenAI Agents SDK. An adapter converts and delegates: every rule
(budget, redaction, retraction) lives in chatkeep's core.
"""
