"""The FastAPI recipe (``examples/fastapi_app.py``) on both stores: the lifespan opens and
closes the keep, the tenant comes from the credentials, a streamed answer is relayed and
then recorded with its usage, and another tenant's token cannot reach the conversation."""

from __future__ import annotations

import sys
from pathlib import Path

import openai
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from chatkeep.testing import FakeOpenAIServer, Reply

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.fastapi_app import create_app

ALICE = {"Authorization": "Bearer token-acme-alice"}
BOB = {"Authorization": "Bearer token-globex-bob"}


def test_a_streamed_answer_is_relayed_recorded_and_billed(db_url: str) -> None:
    with FakeOpenAIServer() as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        app = create_app(db_url, client)
        server.script(Reply.ok("Refund R-88 is on its way.", prompt_tokens=30,
                               completion_tokens=7),
                      Reply.ok("It takes three days.", prompt_tokens=50, completion_tokens=5))
        with TestClient(app) as http:
            first = http.post("/conversations/support-4711/messages", headers=ALICE,
                              json={"text": "My order arrived broken."})
            assert first.status_code == 200 and first.text == "Refund R-88 is on its way."
            second = http.post("/conversations/support-4711/messages", headers=ALICE,
                               json={"text": "How long?"})
            assert second.text == "It takes three days."
            shown = http.get("/conversations/support-4711", headers=ALICE).json()
            assert [m["content"] for m in shown["messages"]] == [
                "My order arrived broken.", "Refund R-88 is on its way.", "How long?",
                "It takes three days."]
            assert shown["billed_tokens"] == 30 + 7 + 50 + 5
            # the second request replayed the first exchange
            assert [m["content"] for m in server.requests[1]["messages"][1:]] == [
                "My order arrived broken.", "Refund R-88 is on its way.", "How long?"]
            assert server.requests[1]["stream"] is True

            # Another tenant's token: the same key is another (empty) conversation.
            assert http.get("/conversations/support-4711", headers=BOB).status_code == 404
            assert http.get("/conversations/support-4711",
                            headers={"Authorization": "Bearer nope"}).status_code == 401
