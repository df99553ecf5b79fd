"""Pydantic AI at its edges (issue 30): files in prompts and tool results, values known only
from the question they answer, the user's own values back in what the app shows, and the
streaming APIs (``run_stream``, ``iter``, ``run_stream_events``) end to end.

Every agent here runs Pydantic AI's own ``OpenAIChatModel`` against the strict fake Chat
Completions server (``chatkeep.testing.FakeOpenAIServer``): what is checked is every byte
the server received."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    BinaryContent,
    CachePoint,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UploadedFile,
    UserPromptPart,
)
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider
from streaming_runs import store_result, streamed_turn

from chatkeep import Chatkeep, InvalidArgument, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.pydantic_ai import (
    ChatkeepConversationStore,
    ChatkeepHistory,
    PreparedRequest,
)
from chatkeep.integrations.pydantic_ai._scrub import scrub_request
from chatkeep.testing import FakeAnthropicServer, FakeOpenAIServer, Reply
from chatkeep.testing.fake_openai import FakeServerBase, pieces

ORG = Ref("organization", 1)
EMAIL = "ana.garcia@example.com"
PHONE = "+44 7911 123456"
SSN = "536221234"
#: A tiny PNG: image bytes, which no redaction can read.
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082")
PRIVACY = {"privacy": {"anonymize_pii": True}}


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def chat_model(server: FakeOpenAIServer) -> OpenAIChatModel:
    """Pydantic AI's own Chat Completions model, on the fake server."""
    return OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=server.base_url,
                                                             api_key="k"))


def open_keep(kind: str, db_url: str, **config: Any) -> Chatkeep | AsyncChatkeep:
    config = {**PRIVACY, **config}
    if kind == "async":
        return AsyncChatkeep(db_url, config=config, dispatcher="inline")
    return Chatkeep(db_url, config=config, dispatcher="inline")


async def close(keep: Chatkeep | AsyncChatkeep) -> None:
    if isinstance(keep, AsyncChatkeep):
        await keep.close()
    else:
        keep.close()


def received(server: FakeServerBase) -> str:
    """Every byte the fake server received, as text."""
    assert not server.rejected, server.rejected
    return "\n".join(server.bodies())


def no_raw(text: str, *values: str) -> None:
    folded = text.casefold()
    for value in values:
        for form in {value, value.replace(" ", ""), "".join(c for c in value if c.isdigit())}:
            if len(form) >= 6:
                assert form.casefold() not in folded, f"{form!r} reached the server"


@contextlib.contextmanager
def file_server(files: dict[str, tuple[str, bytes]]) -> Iterator[str]:
    """A local HTTP server serving ``path -> (media type, bytes)``; yields its origin."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            media, body = files[self.path]
            self.send_response(200)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- item 4: files in prompts and tool results ------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_files_in_prompts_and_tool_results_leave_scrubbed(db_url: str, provider: str) -> None:
    """A user prompt with an image URL, a text document by URL, a text file and an image,
    and a tool returning text beside files: every string (URLs, file names, the text of
    text-like files, wherever they come from) reaches the server redacted; image bytes go
    as they are (they cannot be redacted); an image URL with no value in it stays a URL."""
    docs = {"/notes.txt": ("text/plain", f"Call {PHONE} about the order.".encode())}

    async def scenario(server: Any, origin: str) -> None:
        async with AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            model = chat_model(server) if provider == "openai" else AnthropicModel(
                "claude-sonnet-5-5", provider=AnthropicProvider(base_url=server.base_url,
                                                                api_key="k"))
            agent: Agent[Any, Any] = Agent(model, capabilities=[ChatkeepHistory(store)])

            @agent.tool_plain
            def fetch_files() -> list[Any]:
                """The customer's files."""
                return [f"the files of {EMAIL}",
                        BinaryContent(f"owner: {EMAIL}, phone {PHONE}".encode(),
                                      media_type="text/plain", identifier=f"{EMAIL}.txt"),
                        ImageUrl(f"https://files.test/{EMAIL}/photo.png"),
                        BinaryContent(PNG, media_type="image/png"),
                        {"owner": EMAIL, "note": "structured beside the files"}]

            server.script(Reply.calls(("call_1", "fetch_files", "{}")), Reply.ok("done"))
            conversation = await store.for_run("files")
            result = await agent.run(
                [f"Here is everything, mail {EMAIL}",
                 ImageUrl(f"https://img.test/{EMAIL}.png"),
                 ImageUrl("https://img.test/plain.png"),
                 DocumentUrl(f"{origin}/notes.txt", force_download="allow-local"),
                 BinaryContent(f"Signed, {EMAIL}".encode(), media_type="text/plain")],
                conversation=conversation)
            assert result.output == "done"
            await store.save(result)

    fake = FakeOpenAIServer() if provider == "openai" else FakeAnthropicServer()
    with fake as server, file_server(docs) as origin:
        run(scenario(server, origin))
        sent = received(server)
    no_raw(sent, EMAIL, PHONE)
    assert len(server.requests) == 2
    assert "<EMAIL_1>" in sent and "<PHONE_1>" in sent
    assert "Call <PHONE_1> about the order." in sent  # the document, read and scrubbed
    assert "https://img.test/plain.png" in sent  # a URL holding no value stays a URL
    assert "[image-url withheld: https://img.test/<EMAIL_1>.png]" in sent
    assert "iVBORw0KGgo" in sent  # the PNG's bytes (base64), sent as they are


def test_the_scrub_keeps_what_carries_no_text_and_names_unread_files(db_url: str) -> None:
    """Through the session's real egress, with no I/O: a cache point, an uploaded file's id,
    an image URL without a value and image bytes go out as the very objects they were
    beside a changed text; a structured result under provider key names is redacted; a
    text document by URL not read yet goes out as a note, never as its URL, and is listed
    as unread; once its text is given it goes out as that text, scrubbed."""
    keep = Chatkeep(db_url, config=PRIVACY)
    try:
        session = keep.sessions.create(ORG)
        cache, uploaded = CachePoint(), UploadedFile(file_id="file-abc", provider_name="openai",
                                                     media_type="text/plain")
        image, png = ImageUrl("https://x.test/a.png"), BinaryContent(PNG, media_type="image/png")
        doc = DocumentUrl("https://docs.test/notes.txt")
        messages: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart([f"mail {EMAIL}", cache, uploaded, image, doc])]),
            ModelResponse(parts=[ToolCallPart("t", {}, tool_call_id="c")]),
            ModelRequest(parts=[ToolReturnPart("t", [{"signature": EMAIL, "type": PHONE,
                                                      "role": "x"}, png],
                                               tool_call_id="c")])]

        def scrub(body: Any) -> Any:
            return keep.privacy.scrub(session, body)

        out = scrub_request(messages, [], scrub)
        user = out.messages[0].parts[0]
        assert isinstance(user, UserPromptPart)
        assert user.content[0] == "mail <EMAIL_1>"
        assert [user.content[i] is item for i, item in enumerate(
            [cache, uploaded, image], start=1)] == [True, True, True]
        assert user.content[4] == "[document-url unread: https://docs.test/notes.txt]"
        assert out.unread == [doc]
        result = out.messages[2].parts[0]
        assert isinstance(result, ToolReturnPart)
        returned: list[Any] = list(cast(list[Any], result.content))
        assert returned[1] is png
        assert EMAIL not in json.dumps(returned[0]) and "7911" not in json.dumps(returned[0])
        read = scrub_request(messages, [], scrub, {doc.url: f"Write to {EMAIL}"})
        part = read.messages[0].parts[0]
        assert isinstance(part, UserPromptPart) and read.unread == []
        assert part.content[4] == BinaryContent(b"Write to <EMAIL_1>", media_type="text/plain")
    finally:
        keep.close()


# -- item 5: a value known only from the question it answers ---------------------------


def test_a_bare_answer_to_the_stored_question_never_reaches_the_server(db_url: str) -> None:
    async def scenario(server: FakeOpenAIServer) -> None:
        async with AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server),
                                           capabilities=[ChatkeepHistory(store)])
            server.script(Reply.ok("What is your social security number?"),
                          Reply.ok("Thank you, noted."))
            first = await agent.run("I need to verify my account",
                                    conversation=await store.for_run("ssn"))
            await store.save(first)
            second = await agent.run(SSN, conversation=await store.for_run("ssn"))
            await store.save(second)
            session = await keep.sessions.by_key("ssn", ORG)
            stored = [m.content for m in await session.read_messages()]
            assert SSN in stored  # chatkeep keeps what the user wrote

    with FakeOpenAIServer() as server:
        run(scenario(server))
        sent = received(server)
    assert len(server.requests) == 2
    assert SSN not in sent and "536-22-1234" not in sent
    assert "<US_SSN_1>" in server.bodies()[1]


# -- item 10: the user's own values back ------------------------------------------------


class Contact(BaseModel):
    email: str
    note: str


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_the_user_sees_their_values_and_so_do_pydantic_ais_messages(
        db_url: str, kind: str) -> None:
    """``result.output`` (text and structured) and every streamed text delta carry the real
    value, a placeholder split across deltas included; so do the messages Pydantic AI
    keeps (the model's text is restored at the model boundary), while the server only
    ever sees placeholders; with ``restore_output=False`` all is left as written."""
    streamed = "Write to <EMAIL_1> now"
    start = streamed.index("<")
    cuts = list(itertools.accumulate(len(piece) for piece in pieces(streamed)))
    assert any(start < cut < start + len("<EMAIL_1>") for cut in cuts), \
        "the fake must split the placeholder across deltas"

    async def scenario(server: FakeOpenAIServer) -> None:
        keep = open_keep(kind, db_url)
        try:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server),
                                           capabilities=[ChatkeepHistory(store)])
            server.script(Reply.ok("I will write to <EMAIL_1>."))
            result = await agent.run(f"My e-mail is {EMAIL}",
                                     conversation=await store.for_run("show"))
            assert result.output == f"I will write to {EMAIL}."
            response = result.all_messages()[-1]
            assert isinstance(response, ModelResponse)
            assert response.parts == [TextPart(f"I will write to {EMAIL}.")]
            await store.save(result)

            server.script(Reply.ok(streamed))
            deltas: list[str] = []
            async with agent.run_stream("Write to me", conversation=await store.for_run(
                    "show")) as stream:
                async for delta in stream.stream_text(delta=True, debounce_by=None):
                    deltas.append(delta)
            assert "".join(deltas) == streamed.replace("<EMAIL_1>", EMAIL)
            assert all("<EMAIL" not in d and "IL_1>" not in d for d in deltas), deltas
            assert await stream.get_output() == streamed.replace("<EMAIL_1>", EMAIL)
            assert stream.response.parts == [TextPart(streamed.replace("<EMAIL_1>", EMAIL))]
            await store.save(stream)

            structured: Agent[Any, Contact] = Agent(
                chat_model(server), output_type=Contact,
                capabilities=[ChatkeepHistory(store)])
            server.script(Reply.calls(("c1", "final_result",
                                       '{"email": "<EMAIL_1>", "note": "on file"}')))
            contact = await structured.run("Which e-mail do you have?",
                                           conversation=await store.for_run("show"))
            assert contact.output == Contact(email=EMAIL, note="on file")
            await store.save(contact)

            kept: Agent[Any, Any] = Agent(chat_model(server), capabilities=[
                ChatkeepHistory(store, restore_output=False)])
            server.script(Reply.ok("Still <EMAIL_1>."))
            plain = await kept.run("And now?", conversation=await store.for_run("show"))
            assert plain.output == "Still <EMAIL_1>."
            assert plain.all_messages()[-1].parts == [TextPart("Still <EMAIL_1>.")]
        finally:
            await close(keep)

    with FakeOpenAIServer() as server:
        run(scenario(server))
        sent = received(server)
    no_raw(sent, EMAIL)


@pytest.mark.parametrize("mode", ["run_stream", "iter", "run_stream_events"])
def test_a_placeholder_cut_by_the_first_chunk_is_restored_whole(
        db_url: str, mode: str) -> None:
    """``run_stream`` shows a response's first text from the response it accumulates:
    restored at the model boundary, a placeholder that chunk cuts comes back whole (held
    back until the next chunk settles it), and so does one split in later deltas."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for delta in ["Write to <EMA", "IL_1> or <EMAIL_", "1> soon"]:
            yield delta

    async def scenario() -> None:
        async with AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            await keep.privacy.scrub(await keep.sessions.open("cut", ORG), {"t": EMAIL})
            agent: Agent[Any, Any] = Agent(FunctionModel(stream_function=stream),
                                           capabilities=[ChatkeepHistory(store)])
            saved, shown = await streamed_turn(mode, agent, store, "cut", "hi")
            assert shown == f"Write to {EMAIL} or {EMAIL} soon"
            assert store_result(saved).output == f"Write to {EMAIL} or {EMAIL} soon"

    run(scenario())


def test_a_paused_run_keeps_the_arguments_the_model_wrote(db_url: str) -> None:
    """A run paused for an approval outputs its waiting calls as the model wrote them;
    once approved, the tool runs with the real values (``restore_tool_args``)."""

    async def scenario(server: FakeOpenAIServer) -> None:
        async with AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server),
                                           output_type=[str, DeferredToolRequests],
                                           capabilities=[ChatkeepHistory(store)])

            erased: list[str] = []

            @agent.tool_plain(requires_approval=True)
            def forget(email: str) -> str:
                """Erase a contact."""
                erased.append(email)
                return f"erased {email}"

            server.script(Reply.calls(("c1", "forget", '{"email": "<EMAIL_1>"}')),
                          Reply.ok("Erased <EMAIL_1>."))
            paused = await agent.run(f"Forget {EMAIL}", conversation=await store.for_run("d"))
            assert isinstance(paused.output, DeferredToolRequests)
            assert paused.output.approvals[0].args_as_dict() == {"email": "<EMAIL_1>"}
            await store.save(paused)
            resumed = await agent.run(
                conversation=await store.for_run("d"),
                deferred_tool_results=DeferredToolResults(approvals={"c1": True}))
            assert resumed.output == f"Erased {EMAIL}."
            assert erased == [EMAIL]  # once approved, the tool gets the real value
            await store.save(resumed)

    with FakeOpenAIServer() as server:
        run(scenario(server))
        no_raw(received(server), EMAIL)


def test_a_restorer_for_the_app_own_stream(db_url: str) -> None:
    """``store.restorer`` for text an app streams itself: placeholders split anywhere come
    back whole, unknown ones stay; a conversation that does not redact is left as it is."""

    async def scenario() -> None:
        async with AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            await keep.privacy.scrub(await keep.sessions.open("r", ORG), {"t": EMAIL})
            text = "Mail <EMAIL_1>, not <EMAIL_9>."
            for cut in range(1, len(text)):
                restorer = await store.restorer("r")
                out = restorer.feed(text[:cut]) + restorer.feed(text[cut:]) + restorer.flush()
                assert out == f"Mail {EMAIL}, not <EMAIL_9>."
            assert await store.restore("r", {"to": "<EMAIL_1>"}) == {"to": EMAIL}
            assert await store.restore("none", "<EMAIL_1>") == "<EMAIL_1>"  # no session

    run(scenario())


# -- item 12: the streaming APIs end to end ---------------------------------------------


@pytest.mark.parametrize("mode", ["run_stream", "iter", "run_stream_events"])
def test_streamed_runs_are_recorded_billed_budgeted_and_redacted(db_url: str,
                                                                  mode: str) -> None:
    """Each streaming API, turn after turn with a tool round, on a budget small enough to
    fold: every turn is saved (the conversation reloads exactly), every response billed
    to the tenant as the provider reported it, every request within the budget, no raw
    value sent, and the app shown the user's values."""
    prepared: list[PreparedRequest] = []
    more = " I would like a detailed answer, with everything you know about it."
    turns = [f"My e-mail is {EMAIL}, call {PHONE}. Look me up.", f"What is the weather?{more}",
             f"Tell me more about it please.{more}", f"And tomorrow?{more}",
             f"Thanks, write to me.{more}"]

    def responder(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if "summary" in str(body["messages"][0].get("content", "")).lower() and \
                "running summary" in str(body["messages"][0].get("content")):
            return Reply.ok("The customer <EMAIL_1> asked about the weather.")
        if last["role"] == "tool":
            return Reply.ok("I found your record: <EMAIL_1>, phone <PHONE_1>.", prompt_tokens=40,
                            completion_tokens=9)
        if "Look me up" in str(last.get("content")):
            return Reply.calls(("call_1", "lookup", '{"who": "<EMAIL_1>"}'),
                               prompt_tokens=30, completion_tokens=7)
        return Reply.ok("It is sunny, <EMAIL_1>.", prompt_tokens=20, completion_tokens=5)

    async def scenario(server: FakeOpenAIServer) -> None:
        config = {**PRIVACY, "chat": {"max_history_tokens": 100, "recent_messages_min": 2},
                  "memory": {"distil_on_compress": False}}
        client_model = chat_model(server)
        import openai
        summarizer = openai.AsyncOpenAI(base_url=server.base_url, api_key="k",
                                        max_retries=0)
        async with AsyncChatkeep(db_url, model=summarizer, config=config,
                                 dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(client_model, capabilities=[
                ChatkeepHistory(store, on_request=prepared.append)])
            looked_up: list[str] = []

            @agent.tool_plain
            def lookup(who: str) -> str:
                """The customer's record."""
                looked_up.append(who)
                return f"customer {EMAIL}, phone {PHONE}"

            for prompt in turns:
                saved, shown = await streamed_turn(mode, agent, store, "s", prompt)
                await store.save(saved)
                result = store_result(saved)
                assert "<EMAIL_1>" not in shown and "<EMAIL_1>" not in str(result.output)
                assert EMAIL in shown
            assert looked_up == [EMAIL]  # the tool gets the real value (restore_tool_args)
            (chat,) = [line for line in await keep.usage(ORG) if line.purpose == "chat"]
            # The conversation's usage (every run of it) is what the ledger holds.
            assert (chat.prompt_tokens, chat.completion_tokens) == (
                result.usage.input_tokens, result.usage.output_tokens)
            assert chat.prompt_tokens == 30 + 40 + 20 * (len(turns) - 1)
            assert chat.completion_tokens == 7 + 9 + 5 * (len(turns) - 1)
            loaded = await store.load("s")
            assert loaded is not None and len(loaded.messages) == 2 * len(turns) + 2
            session = await keep.sessions.by_key("s", ORG)
            assert session.summary_watermark > 0, "the budget folded older turns"

    with FakeOpenAIServer(responder=responder) as server:
        run(scenario(server))
        sent = received(server)
    no_raw(sent, EMAIL, PHONE)
    assert prepared and all(p.over_budget_reason is None for p in prepared)
    assert all(p.tokens <= p.budget for p in prepared)


def test_an_unfinished_stream_is_refused_with_a_typed_error(db_url: str) -> None:
    async def scenario(server: FakeOpenAIServer) -> None:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server),
                                           capabilities=[ChatkeepHistory(store)])
            async with agent.run_stream("hi", conversation=await store.for_run("u")) as s:
                with pytest.raises(InvalidArgument, match="cannot be saved yet"):
                    await store.save(s)
                await s.get_output()
            async with agent.iter("hi", conversation=await store.for_run("u")) as agent_run:
                with pytest.raises(InvalidArgument, match="has not finished"):
                    await store.save(agent_run)
            with pytest.raises(InvalidArgument, match="cannot save a str"):
                await store.save("hi")  # type: ignore[arg-type]
            assert await store.load("u") is None

    with FakeOpenAIServer() as server:
        run(scenario(server))


def test_exact_reload_of_a_streamed_conversation(db_url: str) -> None:
    """What ``run_stream`` saved loads back exactly as Pydantic AI holds it."""

    async def scenario(server: FakeOpenAIServer) -> None:
        async with AsyncChatkeep(db_url, config=PRIVACY, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server),
                                           capabilities=[ChatkeepHistory(store)])
            server.script(Reply.ok("Noted <EMAIL_1>."))
            saved, _ = await streamed_turn("run_stream", agent, store, "x", f"I am {EMAIL}")
            await store.save(saved)
            loaded = await store.load("x")
            assert loaded is not None
            assert ModelMessagesTypeAdapter.dump_json(loaded.messages) == \
                ModelMessagesTypeAdapter.dump_json(saved.all_messages())

    with FakeOpenAIServer() as server:
        run(scenario(server))
