"""A total deadline on every model and embedding call (issue 22, item 2): an endpoint that
trickles its reply one byte every half second cannot keep a call, nor a turn, alive past
``llm.timeout``; on both APIs and both stores."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import openai
import pytest

from chatkeep import Chatkeep, ModelError, Ref
from chatkeep.llm.deadline import Deadline
from chatkeep.llm.openai_client import AsyncOpenAIChatModel, OpenAIChatModel
from chatkeep.memory.embedders.openai_embeddings import AsyncOpenAIEmbedder, OpenAIEmbedder
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 1)
SYSTEM = "You are a careful legal assistant."
TRICKLE = 0.5  # seconds between bytes: never silent for a whole read timeout
TIMEOUT = 1.0
SLACK = TRICKLE + 1.0  # one read past the deadline, and a loaded 2-core machine
LONG = "a reply that would take minutes to arrive " * 4

MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture
def trickling(llm_server: FakeOpenAIServer) -> FakeOpenAIServer:
    llm_server.trickle = TRICKLE
    return llm_server


def elapsed(started: float) -> float:
    return time.monotonic() - started


@pytest.mark.parametrize("retries", [0, 2])
def test_a_trickling_reply_is_cut_at_the_deadline(trickling: FakeOpenAIServer,
                                                  retries: int) -> None:
    model = OpenAIChatModel(base_url=trickling.base_url, api_key="k", timeout=TIMEOUT,
                            max_retries=retries)
    trickling.script(*[Reply.ok(LONG)] * 3)
    started = time.monotonic()
    with pytest.raises(ModelError, match="deadline"):
        model.complete(MESSAGES, model="m")
    assert elapsed(started) < TIMEOUT + SLACK


@pytest.mark.parametrize("retries", [0, 2])
def test_the_async_twin_keeps_the_same_deadline(trickling: FakeOpenAIServer,
                                                retries: int) -> None:
    model = AsyncOpenAIChatModel(base_url=trickling.base_url, api_key="k", timeout=TIMEOUT,
                                 max_retries=retries)
    trickling.script(*[Reply.ok(LONG)] * 3)
    started = time.monotonic()
    with pytest.raises(ModelError, match="deadline"):
        asyncio.run(model.complete(MESSAGES, model="m"))
    assert elapsed(started) < TIMEOUT + SLACK


def test_a_clients_own_timeout_is_the_deadline(trickling: FakeOpenAIServer) -> None:
    """An application's ``openai.OpenAI(timeout=1)`` gets the same total deadline."""
    client = openai.OpenAI(base_url=trickling.base_url, api_key="k", timeout=TIMEOUT,
                           max_retries=1)
    model = OpenAIChatModel(client)
    assert (model.timeout, model.max_retries) == (TIMEOUT, 1)
    trickling.script(Reply.ok(LONG), Reply.ok(LONG))
    started = time.monotonic()
    with pytest.raises(ModelError, match="deadline"):
        model.complete(MESSAGES, model="m")
    assert elapsed(started) < TIMEOUT + SLACK


def test_retries_happen_within_the_deadline(llm_server: FakeOpenAIServer) -> None:
    model = OpenAIChatModel(base_url=llm_server.base_url, api_key="k", timeout=5.0,
                            max_retries=2)
    llm_server.script(Reply.error(500), Reply.error(429, "slow down"), Reply.ok("fine"))
    assert model.complete(MESSAGES, model="m").text == "fine"
    assert len(llm_server.requests) == 3
    llm_server.script(Reply.error(400, "bad request"))  # not worth another attempt
    with pytest.raises(ModelError, match="BadRequestError"):
        model.complete(MESSAGES, model="m")
    assert len(llm_server.requests) == 4


def test_no_retry_starts_that_cannot_finish(llm_server: FakeOpenAIServer) -> None:
    """A retry whose back-off would end past the deadline is not made: the error is."""
    model = OpenAIChatModel(base_url=llm_server.base_url, api_key="k", timeout=0.4,
                            max_retries=5)
    llm_server.script(*[Reply.error(503)] * 6)
    started = time.monotonic()
    with pytest.raises(ModelError, match="InternalServerError"):
        model.complete(MESSAGES, model="m")
    assert len(llm_server.requests) == 1 and elapsed(started) < 0.4 + SLACK


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_embeddings_have_the_deadline_too(trickling: FakeOpenAIServer, twin: str) -> None:
    started = time.monotonic()
    with pytest.raises(ModelError, match="deadline"):
        if twin == "sync":
            OpenAIEmbedder("e", base_url=trickling.base_url, api_key="k", timeout=TIMEOUT,
                           max_retries=2).embed(["some text"] * 4)
        else:
            asyncio.run(AsyncOpenAIEmbedder("e", base_url=trickling.base_url, api_key="k",
                                            timeout=TIMEOUT, max_retries=2)
                        .embed(["some text"] * 4))
    assert elapsed(started) < TIMEOUT + SLACK


def test_a_deadline_counts_down() -> None:
    now = [100.0]
    deadline = Deadline(2.0, clock=lambda: now[0])
    assert deadline.remaining() == 2.0
    now[0] = 101.5
    assert deadline.remaining() == 0.5
    deadline.check("m")
    now[0] = 103.0
    assert deadline.remaining() == 0.0
    with pytest.raises(ModelError, match="2 s deadline"):
        deadline.check("m")


def test_a_turn_on_a_trickling_summarizer_ends_in_time_and_keeps_everything(
        make_keep: Callable[..., Chatkeep], trickling: FakeOpenAIServer) -> None:
    """The whole turn: ``build_history`` over budget, the summarizer trickling, on every
    API and store; the fold fails (logged, nothing lost) once the deadline passes."""
    keep = make_keep(config={
        "llm": {"base_url": trickling.base_url, "api_key": "k", "timeout": TIMEOUT,
                "max_retries": 0},
        "chat": {"max_history_tokens": 1000, "recent_messages_min": 4,
                 "summary_max_tokens": 200, "summary_model": "cheap-model"},
        "memory": {"distil_on_compress": False}})
    s = keep.sessions.create(tenant=ORG)
    for i in range(10):
        s.add_user(f"U{i} " + "question " * 40)
        s.add_assistant(f"A{i} " + "answer " * 40)
    trickling.script(Reply.ok(LONG))
    started = time.monotonic()
    history = keep.compressor.build_history(s, SYSTEM)
    assert elapsed(started) < TIMEOUT + SLACK
    assert history.info.summary_failed
    assert keep.sessions.get_unscoped(s.id).summary_watermark == 0
    assert len(keep.sessions.get_unscoped(s.id).messages) == 20
