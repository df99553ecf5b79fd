"""Test helpers shipped with chatkeep (usable in your own tests too)."""

from chatkeep.testing.fake_openai import FakeOpenAIServer, Reply

__all__ = ["FakeOpenAIServer", "Reply"]
