"""LangSmith tracing beside a redacting ChatkeepMiddleware (issue 30: nothing raw in any
framework's traces). LangChain's tracer posts each run's inputs and outputs (the graph
state, which holds the user's raw text) to LangSmith, where no middleware hook sees them:
the middleware refuses to run a redacting thread under content tracing, and with
LangSmith's hide settings on, what the real LangSmith client posts (to a local endpoint)
holds no raw value."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_wire import WireChatModel

from chatkeep import Chatkeep, PrivacyError, Ref
from chatkeep.integrations.langchain import ChatkeepMiddleware
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 303)
EMAIL = "ana.garcia@example.com"
PRIVACY = {"privacy": {"anonymize_pii": True}}


class Ingest:
    """A local stand-in for LangSmith's API: records every request body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                owner.bodies.append(self.rfile.read(length))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_POST = do_PATCH = _answer

            def do_GET(self) -> None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tracing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Ingest]:
    """LangSmith tracing on, to a local endpoint (never the network)."""
    ingest = Ingest()
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", ingest.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    for name in ("HIDE_INPUTS", "HIDE_OUTPUTS"):
        for namespace in ("LANGSMITH", "LANGCHAIN"):
            monkeypatch.delenv(f"{namespace}_{name}", raising=False)
    fresh_langsmith(monkeypatch)
    try:
        yield ingest
    finally:
        ingest.close()
        fresh_langsmith(monkeypatch)


def fresh_langsmith(monkeypatch: pytest.MonkeyPatch) -> None:
    """LangSmith caches its settings and client on first use: read them anew."""
    from langsmith import run_trees, utils

    utils.get_env_var.cache_clear()
    monkeypatch.setattr(run_trees, "_CLIENT", None)


def run_once(keep: Chatkeep, server: FakeOpenAIServer, middleware: ChatkeepMiddleware) -> Any:
    agent: Any = create_agent(WireChatModel(base_url=server.base_url), [],
                              middleware=[middleware])
    return agent.invoke({"messages": [{"role": "user", "content": f"I am {EMAIL}."}]},
                        {"configurable": {"thread_id": "t-1"}}, context={"tenant": ORG})


def test_a_redacting_middleware_is_refused_under_content_tracing(db_url: str,
                                                                  tracing: Ingest) -> None:
    with Chatkeep(db_url, config=PRIVACY) as keep:
        with pytest.raises(PrivacyError, match="LANGSMITH_HIDE_INPUTS"):
            ChatkeepMiddleware(keep)
        ChatkeepMiddleware(keep, anonymize_pii=False)  # its threads do not redact
    with Chatkeep(db_url) as plain:  # the application's switch off: nothing redacts
        ChatkeepMiddleware(plain)


def test_tracing_turned_on_later_refuses_the_model_call(db_url: str, tracing: Ingest,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    with Chatkeep(db_url, config=PRIVACY) as keep, \
            FakeOpenAIServer(responder=lambda body: Reply.ok("Noted.")) as server:
        middleware = ChatkeepMiddleware(keep)
        monkeypatch.setenv("LANGSMITH_TRACING", "true")
        with pytest.raises(PrivacyError):
            run_once(keep, server, middleware)
        assert server.requests == []


def test_with_content_hidden_langsmith_receives_no_raw_value(db_url: str, tracing: Ingest,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.setenv("LANGSMITH_HIDE_INPUTS", "true")
    monkeypatch.setenv("LANGSMITH_HIDE_OUTPUTS", "true")
    fresh_langsmith(monkeypatch)
    from langchain_core.tracers.langchain import wait_for_all_tracers

    with Chatkeep(db_url, config=PRIVACY) as keep, \
            FakeOpenAIServer(responder=lambda body: Reply.ok("Noted, <EMAIL_1>.")) as server:
        result = run_once(keep, server, ChatkeepMiddleware(keep))
        wait_for_all_tracers()
    assert EMAIL in result["messages"][-1].content  # the user sees their value
    assert tracing.bodies, "the tracer posted its runs"
    assert any(b"t-1" in body or b"ChatkeepMiddleware" in body or b"model" in body
               for body in tracing.bodies), "the posts are readable (not compressed)"
    for body in [*tracing.bodies, *(b.encode() for b in server.bodies())]:
        assert EMAIL.encode() not in body and b"ana.garcia" not in body
