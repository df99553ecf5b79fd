"""``SplitResponder`` answers chatkeep's own calls apart from the app's (issue 35, item 4):
an app's scripted answers reach the app in order although chatkeep folds and distils in
between, on the real ``openai`` SDK against the strict fake server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anthropic
import openai
import pytest

from chatkeep import Chatkeep, InvalidArgument, Ref
from chatkeep.history.summarizers.llm import SYSTEM_PROMPT, USER_PROMPT
from chatkeep.memory.prompts import DecisionItem, decision_messages, extraction_messages
from chatkeep.memory.scopes import Scope
from chatkeep.testing import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    Reply,
    SplitResponder,
    purpose_of,
)

APP_SYSTEM = "You are the shop's support assistant."
CONFIG = {"chat": {"max_history_tokens": 400, "recent_messages_min": 2,
                   "summary_max_tokens": 80, "summary_model": "cheap-model"},
          "memory": {"distil_on_compress": True}}


def summary_messages() -> list[dict[str, str]]:
    """A fold's request, as ``LLMSummarizer`` words it."""
    return [{"role": "system", "content": SYSTEM_PROMPT.format(language="English",
                                                               max_words=60)},
            {"role": "user", "content": USER_PROMPT.format(
                items="(none)", narrative="(none)", transcript="user: where is my parcel?")}]


@pytest.fixture
def responder() -> SplitResponder:
    return SplitResponder()


@pytest.fixture
def server(responder: SplitResponder) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder=responder) as fake:
        yield fake


def test_the_apps_script_is_taken_by_the_apps_calls_only(
        make_keep: Callable[..., Chatkeep], server: FakeOpenAIServer,
        responder: SplitResponder) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=5)
    keep = make_keep(model=client, config=CONFIG)
    answers = [f"Answer {n}: " + "the parcel is on its way " * 6 for n in range(8)]
    responder.script("app", *(Reply.ok(a) for a in answers))
    session = keep.sessions.create(Ref("organization", 1), Ref("user", "ana"))
    got = []
    for n in range(8):
        session.add_user(f"Question {n}: where is order {1000 + n}? " + "please check " * 8)
        history = keep.compressor.build_history(session, APP_SYSTEM)
        reply = client.chat.completions.create(model="app-model", messages=history)
        got.append(reply.choices[0].message.content)
        session.add_assistant_response(reply)
    assert got == answers  # no scripted answer went to a summary or a distillation
    assert "summary" in responder.purposes and "distil" in responder.purposes
    assert responder.purposes.count("app") == 8
    assert session.summary_watermark > 0 and session.summary
    for body in responder.bodies["app"]:
        assert body["model"] == "app-model"
    for body in responder.bodies["summary"]:
        assert body["model"] == "cheap-model"


def test_every_prompt_of_chatkeeps_is_told_apart() -> None:
    body = {"model": "m", "messages": summary_messages()}
    system = summary_messages()[0]["content"]
    assert purpose_of(body) == "summary"
    extract = extraction_messages("user: hi", [Scope.TENANT], None, "English")
    assert purpose_of({"messages": extract}) == "distil"
    decide = decision_messages([DecisionItem(0, "A fact.", ())])
    assert purpose_of({"messages": decide}) == "decide"
    assert purpose_of({"messages": [{"role": "system", "content": APP_SYSTEM},
                                    {"role": "user", "content": "hi"}]}) == "app"
    # The Anthropic shape (top-level system) and the Responses one (instructions, input).
    assert purpose_of({"system": extract[0]["content"], "messages": []}) == "distil"
    assert purpose_of({"system": [{"type": "text", "text": decide[0]["content"]}]}) == "decide"
    assert purpose_of({"instructions": system, "input": []}) == "summary"
    assert purpose_of({"input": [{"role": "developer", "content": [
        {"type": "input_text", "text": APP_SYSTEM}]}]}) == "app"


def test_default_replies_are_valid_and_a_script_serves_its_purpose_only() -> None:
    responder = SplitResponder(app=lambda body: Reply.ok("from the app's responder"))
    responder.script("summary", Reply.error(500))
    decide = {"messages": decision_messages([DecisionItem(0, "A.", ()),
                                             DecisionItem(1, "B.", ())])}
    app = {"messages": [{"role": "user", "content": "hi"}]}
    assert responder(app).text == "from the app's responder"
    summary_body = {"messages": summary_messages()}
    assert responder(summary_body).status == 500  # the scripted one, for its purpose
    # Then the default: a valid edit whose narrative is the new part of the conversation.
    assert '"narrative": "user: where is my parcel?"' in (responder(summary_body).text or "")
    assert responder(decide).text == \
        '{"decisions": [{"fact": 0, "event": "ADD"}, {"fact": 1, "event": "ADD"}]}'
    assert responder.purposes == ["app", "summary", "summary", "decide"]
    with pytest.raises(InvalidArgument, match="unknown purpose"):
        responder.script("chat", Reply.ok("x"))  # type: ignore[arg-type]


def test_it_serves_the_anthropic_fake_too() -> None:
    responder = SplitResponder()
    responder.script("app", Reply.ok("Hello from Claude"))
    with FakeAnthropicServer(responder=responder) as server:
        client = anthropic.Anthropic(base_url=server.origin, api_key="k", max_retries=0)
        reply = client.messages.create(model="claude", max_tokens=50, system=APP_SYSTEM,
                                       messages=[{"role": "user", "content": "hi"}])
    assert reply.content[0].text == "Hello from Claude"  # type: ignore[union-attr]
    assert responder.purposes == ["app"]
