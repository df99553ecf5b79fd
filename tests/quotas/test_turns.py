"""Quotas on a hand-written loop, against the strict fake server (which counts requests):
``build_history(..., max_output_tokens=N)`` reserves before anything is sent and refuses
a tenant over its quota (nothing sent, another tenant unaffected);
``add_assistant_response`` settles at the reply's real usage; a failed call is released;
a fold the quota cannot hold sends nothing and keeps the previous summary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from chatkeep import Chatkeep, InvalidArgument, QuotaExceeded, Ref
from chatkeep.testing import FakeOpenAIServer, Reply

ORG, OTHER = Ref("organization", 1), Ref("organization", 2)


def turn(keep: Chatkeep, client: openai.OpenAI, session: Any, text: str,
         max_output_tokens: int = 50) -> Any:
    """One turn as a hand-written loop writes it: build, call, record."""
    session.add_user(text)
    history = keep.compressor.build_history(session, "Be brief.",
                                            max_output_tokens=max_output_tokens)
    try:
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=history,
                                               max_tokens=max_output_tokens)
    except openai.APIError:
        if history.info.reservation is not None:
            keep.quotas.release(history.info.reservation)
        raise
    session.add_assistant_response(reply)
    return history


def test_a_tenant_over_its_quota_is_refused_with_nothing_sent(
        keep: Chatkeep, llm_server: FakeOpenAIServer, openai_client: openai.OpenAI) -> None:
    keep.quotas.set(ORG, tokens=10)
    session = keep.sessions.create(ORG)
    with pytest.raises(QuotaExceeded) as refused:
        turn(keep, openai_client, session, "Hello there")
    assert refused.value.remaining == 10 and refused.value.tenant == ORG
    assert llm_server.requests == []
    assert keep.quotas.get(ORG).reserved == 0  # type: ignore[union-attr]
    other = keep.sessions.create(OTHER)  # another tenant is unaffected
    llm_server.script(Reply.ok("Hi."))
    turn(keep, openai_client, other, "Hello there")
    assert len(llm_server.requests) == 1


def test_reservations_settle_to_the_real_usage(
        keep: Chatkeep, llm_server: FakeOpenAIServer, openai_client: openai.OpenAI) -> None:
    keep.quotas.set(ORG, tokens=10_000)
    session = keep.sessions.create(ORG, Ref("user", 3))
    llm_server.script(Reply.ok("Fine.", prompt_tokens=7, completion_tokens=3))
    session.add_user("How are you?")
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=200)
    held = history.info.reservation
    assert held is not None
    quota = keep.quotas.get(ORG)
    assert quota is not None and quota.reserved == history.info.tokens + 200
    reply = openai_client.chat.completions.create(model="m", messages=history, max_tokens=200)
    session.add_assistant_response(reply)
    quota = keep.quotas.get(ORG)
    assert quota is not None and (quota.spent, quota.reserved) == (10, 0)
    assert keep.quotas.settle(held, 10) is False  # settled once, by the response


def test_an_error_before_the_response_releases_the_reservation(
        keep: Chatkeep, llm_server: FakeOpenAIServer, openai_client: openai.OpenAI) -> None:
    keep.quotas.set(ORG, tokens=10_000)
    session = keep.sessions.create(ORG)
    llm_server.script(Reply.error(400, "bad request"))
    with pytest.raises(openai.BadRequestError):
        turn(keep, openai_client, session, "Hello")
    quota = keep.quotas.get(ORG)
    assert quota is not None and (quota.spent, quota.reserved) == (0, 0)


def test_without_max_output_tokens_nothing_is_reserved(keep: Chatkeep) -> None:
    keep.quotas.set(ORG, tokens=1)
    session = keep.sessions.create(ORG)
    session.add_user("Hello")
    history = keep.compressor.build_history(session, "")
    assert history.info.reservation is None
    with pytest.raises(InvalidArgument):
        keep.compressor.build_history(session, "", max_output_tokens=0)
    assert keep.quotas.get(ORG).reserved == 0  # type: ignore[union-attr]


def test_a_fold_with_no_quota_left_sends_nothing_and_keeps_the_summary(
        make_keep: Callable[..., Chatkeep], llm_server: FakeOpenAIServer,
        openai_client: openai.OpenAI) -> None:
    keep = make_keep(model=openai_client, config={"chat": {
        "max_history_tokens": 300, "recent_messages_min": 2},
        "memory": {"distil_on_compress": False}})
    session = keep.sessions.create(ORG)
    for n in range(12):
        session.add_user(f"Question number {n} about the order, with some detail to fold.")
        session.add_assistant(f"Answer number {n}: the order is on its way, with details.")
    keep.quotas.set(ORG, tokens=100)  # less than one summarizer call's ceiling
    history = keep.compressor.build_history(session, "Be brief.")
    assert llm_server.requests == []
    assert history.info.fold_refused is not None and "quota" in history.info.fold_refused
    assert history.info.compressed is False and len(history) > 20  # everything replayed
    assert keep.sessions.get(session.id, ORG).summary_watermark == 0
    assert keep.quotas.get(ORG).reserved == 0  # type: ignore[union-attr]

    keep.quotas.set(ORG, tokens=1_000_000)  # with room, the fold is made and settled
    llm_server.script(Reply.ok("The customer asked about the order.", prompt_tokens=400,
                               completion_tokens=20))
    history = keep.compressor.build_history(session, "Be brief.")
    assert len(llm_server.requests) == 1 and history.info.compressed
    assert history.info.fold_refused is None
    quota = keep.quotas.get(ORG)
    assert quota is not None and (quota.spent, quota.reserved) == (420, 0)
