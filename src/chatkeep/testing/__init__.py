"""Test helpers shipped with chatkeep (usable in your own tests too).

The LangChain fake chat model is in :mod:`chatkeep.testing.langchain` (it needs
``chatkeep[langchain]``, so it is not imported here).
"""

from chatkeep.testing.agent_model import AgentModel, Decision, ToolCallView, Turn
from chatkeep.testing.fake_anthropic import FakeAnthropicServer
from chatkeep.testing.fake_openai import FakeOpenAIServer, Reply
from chatkeep.testing.responders import PURPOSES, Purpose, SplitResponder, purpose_of

__all__ = ["PURPOSES", "AgentModel", "Decision", "FakeAnthropicServer", "FakeOpenAIServer",
           "Purpose", "Reply", "SplitResponder", "ToolCallView", "Turn", "purpose_of"]
