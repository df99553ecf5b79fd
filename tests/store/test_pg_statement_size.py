"""psycopg converts a statement's ``%(name)s`` placeholders once and caches the result,
but only for statements of at most ``MAX_CACHED_STATEMENT_LENGTH`` bytes (4,096) with
at most ``MAX_CACHED_STATEMENT_PARAMS`` parameters (50): over either, it parses the
whole text again on every call. A quota turn's settle once made the answer's append
4,263 bytes, about a tenth of a millisecond per answer. Here every statement of a
turn's hot path (a plain turn, a quota turn, a tool round trip, a fold) stays cached."""

from __future__ import annotations

from typing import Any

import psycopg._queries as queries
import pytest

from chatkeep import Chatkeep, Ref
from support.completions import chat_answer

pytestmark = pytest.mark.postgres

ORG, QUOTA_ORG = Ref("organization", 1), Ref("organization", 2)


def test_no_statement_of_a_turn_is_parsed_on_every_call(
        pg_schema_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hasattr(queries, "_query2pg_nocache"), "psycopg renamed its uncached converter"
    uncached: list[bytes] = []
    original = queries._query2pg_nocache

    def recording(query: bytes, encoding: str) -> Any:
        uncached.append(query)
        return original(query, encoding)

    monkeypatch.setattr(queries, "_query2pg_nocache", recording)
    config = {"chat": {"max_history_tokens": 600, "recent_messages_min": 4,
                       "summary_max_tokens": 300}}
    with Chatkeep(pg_schema_url, dispatcher="inline", config=config) as keep:
        keep.quotas.set(QUOTA_ORG, tokens=10**9, window="month")
        for tenant, budget in ((ORG, None), (QUOTA_ORG, 200)):
            session = keep.sessions.create(tenant)
            for n in range(24):
                session.add_user(f"Question {n}: where is my parcel, and when does it arrive?")
                keep.compressor.build_history(session, "Be brief.", max_output_tokens=budget)
                tool = n % 3 == 0
                session.add_assistant_response(
                    chat_answer(None, call_id=f"call_{n}", answer_id=f"c{n}") if tool
                    else chat_answer(f"Answer {n}.", answer_id=f"c{n}"))
                if tool:
                    session.add_tool_result(f"call_{n}", "shipped on Monday")
                    keep.compressor.build_history(session, "Be brief.",
                                                  max_output_tokens=budget)
                    session.add_assistant_response(chat_answer(f"Answer {n}.",
                                                                answer_id=f"c{100 + n}"))
            assert session.summary_watermark > 0  # the turns folded
    longest = max((len(q) for q in uncached), default=0)
    assert not uncached, (len(uncached), longest, uncached[0][:200])
