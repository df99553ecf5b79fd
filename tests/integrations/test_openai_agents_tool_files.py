"""Agents SDK function tools that return images and files (``ToolOutputImage``,
``ToolOutputFileContent``) on a redacting ``ChatkeepSession`` (issue 30: "tool returns
with files"). The run records them (the text with a marker per part, the parts verbatim),
the model receives them through the egress (the parts' bytes as they are, every string
around them scrubbed), and the strict fake refuses a part without its source, as the real
API does."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIResponsesModel,
    ToolOutputFileContent,
    ToolOutputImage,
    ToolOutputText,
    function_tool,
)

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.formats import openai_responses
from chatkeep.formats.base import RECORDED_ITEM
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.testing import FakeOpenAIServer, Reply
from chatkeep.testing.wire_rules import check_responses

ORG = Ref("organization", 30)
EMAIL = "ana.garcia@example.com"
RAW = [EMAIL, "ana.garcia", "ana garcia"]
IMAGE = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n-chart-").decode()
PDF = base64.b64encode(b"%PDF-1.4 quarterly figures").decode()
FILENAME = f"{EMAIL}-invoice.pdf"


@function_tool
def customer_chart(customer: str) -> list[Any]:
    """The customer's usage chart and their last invoice."""
    return [ToolOutputText(text=f"Chart for {customer}, owner {EMAIL}:"),
            ToolOutputImage(image_url=IMAGE, detail="low"),
            ToolOutputFileContent(file_data=PDF, filename=FILENAME)]


def chart_asker(body: dict[str, Any]) -> Reply:
    """Calls ``customer_chart`` once per user turn, then answers."""
    items = body.get("input") or []
    if items and items[-1].get("type") == "function_call_output":
        return Reply.ok("Here is the chart and the invoice.")
    return Reply.calls((f"call_{len(items)}", "customer_chart", '{"customer": "c-17"}'))


def outputs_of(body: dict[str, Any]) -> list[Any]:
    return [item["output"] for item in body.get("input") or []
            if item.get("type") == "function_call_output"]


def test_a_tool_returning_an_image_and_a_file_is_recorded_and_sent_scrubbed(
        db_url: str) -> None:
    server = FakeOpenAIServer(responder=chart_asker)

    async def scenario() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        config = {"privacy": {"anonymize_pii": True}}
        async with AsyncChatkeep(db_url, model=client, config=config) as keep:
            agent = Agent(name="support", instructions="Show customers their usage.",
                          tools=[customer_chart],
                          model=OpenAIResponsesModel(model="gpt-x", openai_client=client))
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.run(agent, "Show me customer c-17's usage.")
            await session.run(agent, "And again, please.")
            stored = await (await session.conversation()).read_messages()
            return [m for m in stored if m.role.value == "tool"]

    with server:
        tools = asyncio.run(scenario())
    assert server.rejected == []
    # The record keeps everything: the text with a marker per part, the parts verbatim.
    assert len(tools) == 2
    assert tools[0].content == f"Chart for c-17, owner {EMAIL}:[image][file: {FILENAME}]"
    recorded = tools[0].native[openai_responses.NAME][RECORDED_ITEM]
    assert [p["type"] for p in recorded["output"]] == ["input_text", "input_image",
                                                        "input_file"]
    # The model received the image and the file byte for byte, every string scrubbed.
    sent = [json.loads(b) for b in server.bodies()]
    parts = [p for body in sent for output in outputs_of(body) if isinstance(output, list)
             for p in output]
    assert {p.get("image_url") for p in parts if p["type"] == "input_image"} == {IMAGE}
    files = [p for p in parts if p["type"] == "input_file"]
    assert files and {p["file_data"] for p in files} == {PDF}
    assert all(EMAIL not in p["filename"] and "<EMAIL_" in p["filename"] for p in files), files
    for body in server.bodies():
        assert all(raw not in body.lower() for raw in RAW), body[:600]


def test_a_tool_output_part_without_its_source_is_refused_by_the_strict_fake() -> None:
    def body(part: dict[str, Any]) -> dict[str, Any]:
        return {"model": "gpt-x", "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [part]}]}

    assert check_responses(body({"type": "input_image", "image_url": IMAGE})) == []
    assert check_responses(body({"type": "input_file", "file_id": "file-1"})) == []
    for bad in ({"type": "input_image", "detail": "low"}, {"type": "input_file"},
                {"type": "input_text"}, {"type": "output_text", "text": "x"}):
        assert check_responses(body(bad)), bad


@pytest.mark.parametrize("output", [
    "plain text",
    [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
    [{"type": "input_text", "text": "see "}, {"type": "input_image", "file_id": "file-9"}],
])
def test_a_recorded_tool_output_replays_exactly_as_it_was_recorded(output: Any) -> None:
    from chatkeep.messages import Message

    item = {"type": "function_call_output", "call_id": "c1", "output": output}
    draft = openai_responses.from_wire([item])[0]
    message = Message("s", 1, draft.role, draft.content, tool_call_id=draft.tool_call_id,
                      native=draft.native)
    assert openai_responses.message_to_items(message) == [item]
    # Its text changed on the way out (a placeholder): the images and files still follow.
    changed = Message("s", 1, draft.role, "<EMAIL_1>", tool_call_id="c1",
                      native=draft.native)
    out = openai_responses.message_to_items(changed)[0]["output"]
    if isinstance(output, list) and any(p["type"] == "input_image" for p in output):
        assert out == [{"type": "input_text", "text": "<EMAIL_1>"},
                       {"type": "input_image", "file_id": "file-9"}]
    else:
        assert out == "<EMAIL_1>"
