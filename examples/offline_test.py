"""Testing an app offline: chatkeep's strict fake of the OpenAI API answers the summarizer
and the distiller over real HTTP on 127.0.0.1, so the real ``openai`` client runs.

Run as a script, or read it as the pattern for your own pytest fixtures (the docs'
"Testing your app" page shows it; ``tests/test_examples.py`` runs it)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import openai

from chatkeep import Chatkeep, Ref
from chatkeep.testing import FakeOpenAIServer, Reply


def summarize_and_remember(db: Path) -> tuple[str | None, list[str]]:
    """Fold a long conversation with a scripted summary, distil one scripted memory."""
    with FakeOpenAIServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        config = {"chat": {"max_history_tokens": 800, "recent_messages_min": 2}}
        with Chatkeep(f"sqlite:///{db}", model=client, config=config,
                      dispatcher="inline") as keep:
            session = keep.sessions.open("t-1", tenant=Ref("org", 1), actor=Ref("user", 2))
            for i in range(6):
                session.add_user(f"Question {i}: " + "tell me about the lease " * 20)
                session.add_assistant(f"Answer {i}: " + "the lease says " * 20)
            server.script(
                # the summarizer: an edit of the structured summary
                Reply.json({"add": [{"type": "fact", "text": "The lease runs to 2030."}],
                            "update": [], "retire": [], "narrative": "Lease questions."}),
                # the distiller: facts, each with its scope
                Reply.json({"facts": [{"scope": "personal",
                                       "content": "The user rents the flat."}]}),
            )
            keep.compressor.build_history(session, "You are a careful assistant.")
            memories = [m.content for m in keep.memory.list(Ref("org", 1))]
            return session.refresh().summary, memories


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        summary, memories = summarize_and_remember(Path(scratch) / "chat.db")
        print(summary)
        print(memories)
