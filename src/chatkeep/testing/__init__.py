"""Test helpers shipped with chatkeep (usable in your own tests too)."""

from chatkeep.testing.agent_model import AgentModel, Decision, ToolCallView, Turn
from chatkeep.testing.fake_anthropic import FakeAnthropicServer
from chatkeep.testing.fake_openai import FakeOpenAIServer, Reply

__all__ = ["AgentModel", "Decision", "FakeAnthropicServer", "FakeOpenAIServer", "Reply",
           "ToolCallView", "Turn"]
