"""Nothing raw leaves a Pydantic AI run, whatever part carries it (issue 30): a property.

Hypothesis places the six value kinds of the core property test (``egress_helpers``: an
e-mail, a phone, an SSN, a card, an IBAN, a name) in random part types of a conversation
run through ``ChatkeepHistory`` with Pydantic AI's own ``OpenAIChatModel`` on the strict fake
Chat Completions server, each copy in a random surface form (as typed, upper or lower
case, JSON-escaped, URL-encoded):

* user prompt parts: text, an ``ImageUrl``'s URL, a text ``DocumentUrl`` (its text, read
  from a local server), a ``BinaryContent`` text file (its text and its name);
* tool returns: text, structured dicts under any key name (``signature``, ``type``,
  ``role``, ``encrypted_content`` included), files beside text;
* a retry prompt (``ModelRetry`` carrying the value);
* a run paused for an approval and resumed with the deferred tool's result;
* a streamed run (``run_stream``) whose prompt carries the value.

Each value is also written plain once in the first prompt (where any path learns it, as
in the core property test). Every byte the server receives must be free of any raw or
normalised form of every value.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ModelRetry
from pydantic_ai.messages import BinaryContent, DocumentUrl, ImageUrl
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.pydantic_ai import ChatkeepConversationStore, ChatkeepHistory
from chatkeep.testing import FakeOpenAIServer, Reply

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "privacy"))
from egress_helpers import FORMS, KINDS, POOLS, assert_never_raw, written

ORG = Ref("organization", 1)
#: Where a copy of a value is placed.
SLOTS = ("prompt_text", "image_url", "document_url", "binary_text", "binary_name",
         "tool_text", "tool_struct", "tool_file", "retry", "deferred", "streamed")
#: Key names a structured tool result uses (provider vocabulary included).
KEYS = ("signature", "type", "role", "encrypted_content", "name", "note")
PROPERTY = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
INTRO = {"email": "My e-mail is {v}.", "phone": "Call me on {v}.", "ssn": "My SSN is {v}.",
         "card": "My card is {v}.", "iban": "My IBAN is {v}.", "name": "My name is {v}."}


@dataclass
class Scenario:
    values: dict[str, str]
    copies: dict[str, list[tuple[str, str]]]  # slot -> (kind, text written in its form)
    keys: list[str]

    def texts(self, slot: str) -> list[str]:
        return [text for _, text in self.copies.get(slot, [])]

    def joined(self, slot: str, lead: str) -> str:
        return " ".join([lead, *self.texts(slot)])


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    values = {kind: draw(st.sampled_from(POOLS[kind])) for kind in KINDS}
    copies: dict[str, list[tuple[str, str]]] = {}
    for kind, value in values.items():
        for slot in draw(st.lists(st.sampled_from(SLOTS), min_size=1, max_size=4,
                                  unique=True)):
            copies.setdefault(slot, []).append((kind, written(value, draw(st.sampled_from(
                FORMS)))))
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    return Scenario(values, copies, keys)


@contextlib.contextmanager
def file_server() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A local server of text documents (``path -> bytes``, filled per example)."""
    files: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            body = files[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}", files
    finally:
        httpd.shutdown()
        httpd.server_close()


def prompt_of(scenario: Scenario, origin: str, files: dict[str, bytes]) -> list[Any]:
    """The first prompt: every value plain once, then the prompt parts' copies."""
    intro = " ".join(INTRO[kind].format(v=value) for kind, value in scenario.values.items())
    parts: list[Any] = [scenario.joined("prompt_text", f"{intro} Please look me up.")]
    parts += [ImageUrl(f"https://img.test/{text}.png") for text in scenario.texts("image_url")]
    if scenario.texts("document_url"):
        files["/doc.txt"] = scenario.joined("document_url", "Notes:").encode()
        parts.append(DocumentUrl(f"{origin}/doc.txt", force_download="allow-local"))
    if scenario.texts("binary_text") or scenario.texts("binary_name"):
        parts.append(BinaryContent(scenario.joined("binary_text", "Attached:").encode(),
                                   media_type="text/plain",
                                   identifier=" ".join(["file", *scenario.texts(
                                       "binary_name")])))
    return parts


def build_agent(scenario: Scenario, server: FakeOpenAIServer,
                store: ChatkeepConversationStore) -> Agent[Any, Any]:
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=server.base_url,
                                                              api_key="k"))
    agent: Agent[Any, Any] = Agent(model, output_type=[str, DeferredToolRequests],
                                   capabilities=[ChatkeepHistory(store)], retries=2)
    retried: list[bool] = []

    @agent.tool_plain
    def lookup() -> Any:
        """The customer's record."""
        record = {key: scenario.joined("tool_struct", f"{key}:") for key in scenario.keys}
        return [scenario.joined("tool_text", "Record:"), record,
                BinaryContent(scenario.joined("tool_file", "File:").encode(),
                              media_type="text/plain")]

    @agent.tool_plain
    def flaky() -> str:
        """Fails once."""
        if not retried:
            retried.append(True)
            raise ModelRetry(scenario.joined("retry", "Not found, try again for"))
        return "found"

    @agent.tool_plain(requires_approval=True)
    def confirm() -> str:
        """Needs the user's approval."""
        return scenario.joined("deferred", "Confirmed for")

    return agent


async def drive(scenario: Scenario, server: FakeOpenAIServer, origin: str,
                files: dict[str, bytes], db_url: str) -> None:
    server.script(Reply.calls(("c1", "lookup", "{}"), ("c2", "flaky", "{}")),
                  Reply.calls(("c3", "flaky", "{}")),
                  Reply.calls(("c4", "confirm", "{}")),
                  Reply.ok("Confirmed, <EMAIL_1>."),
                  Reply.ok("Anything else I can do for <NAME_1>?"))
    async with AsyncChatkeep(db_url, config={"privacy": {"anonymize_pii": True}},
                             dispatcher="inline") as keep:
        store = ChatkeepConversationStore(keep, tenant=ORG)
        agent = build_agent(scenario, server, store)
        paused = await agent.run(prompt_of(scenario, origin, files),
                                 conversation=await store.for_run("p"))
        assert isinstance(paused.output, DeferredToolRequests)
        await store.save(paused)
        approvals = DeferredToolResults(approvals={paused.output.approvals[0].tool_call_id:
                                                   True})
        resumed = await agent.run(conversation=await store.for_run("p"),
                                  deferred_tool_results=approvals)
        await store.save(resumed)
        async with agent.run_stream(scenario.joined("streamed", "One more thing:"),
                                    conversation=await store.for_run("p")) as stream:
            async for _ in stream.stream_text(delta=True, debounce_by=None):
                pass
        await store.save(stream)


@PROPERTY
@given(scenario=scenarios())
def test_no_raw_value_leaves_any_pydantic_ai_part(scenario: Scenario) -> None:
    with tempfile.TemporaryDirectory() as folder, FakeOpenAIServer() as server, \
            file_server() as (origin, files):
        asyncio.run(drive(scenario, server, origin, files, f"sqlite:///{folder}/chat.db"))
        assert not server.rejected, server.rejected
        bodies = server.bodies()
    assert len(bodies) == 5
    sent = "\n".join(bodies)
    markers = ["Please look me up", "Record:", "File:", "Not found, try again for",
               "Confirmed for", "One more thing:", *(f'"{key}:' for key in scenario.keys)]
    markers += ["Notes:"] if scenario.texts("document_url") else []
    markers += ["Attached:"] if scenario.texts("binary_text") or scenario.texts(
        "binary_name") else []
    assert all(marker in sent for marker in markers), "every part type reached the server"
    assert_never_raw([(f"request {i}", body) for i, body in enumerate(bodies)],
                     scenario.values)
