"""``preview_history``: what the model would receive, shown without folding, calling a
model, billing or writing; on both APIs and both stores."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest
from history_helpers import BUDGET, ORG, SYSTEM, fill

from chatkeep import Chatkeep, InvalidArgument
from chatkeep.formats.base import unfence
from chatkeep.sessions import ChatSession
from chatkeep.testing import FakeOpenAIServer, Reply


def snapshot(keep: Chatkeep, s: ChatSession) -> tuple[object, ...]:
    row = keep.sessions.get_unscoped(s.id).row
    return (row.summary, row.summary_watermark, row.summary_version, row.total_tokens,
            row.pii_vault, row.pii_vault_version)


def test_a_preview_forecasts_the_fold_and_changes_nothing(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI,
        llm_server: FakeOpenAIServer) -> None:
    keep = make_keep(model=openai_client, config=BUDGET)
    s = keep.sessions.create(tenant=ORG)
    fill(s, 10)
    before = snapshot(keep, s)
    for format in ("openai_chat", "openai_responses", "anthropic_messages"):
        preview = keep.compressor.preview_history(s, SYSTEM, format=format)
        assert preview.info.preview and preview.info.over_budget
        assert preview.info.would_fold > 0 and not preview.info.compressed
        assert preview.info.format == format
    assert llm_server.requests == []  # no summarizer call
    assert snapshot(keep, s) == before

    llm_server.script(Reply.ok("GOOD SUMMARY"))
    built = keep.compressor.build_history(s, SYSTEM)
    assert built.info.compressed and not built.info.preview and built.info.would_fold == 0
    after = keep.compressor.preview_history(s, SYSTEM)
    assert unfence(after[1]["content"]).endswith("GOOD SUMMARY")
    assert after.info.would_fold == 0 and not after.info.over_budget
    assert [m["content"] for m in after] == [m["content"] for m in built]


def test_a_preview_redacts_and_stores_no_placeholder(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(config={**BUDGET, "privacy": {"anonymize_pii": True}})
    s = keep.sessions.create(tenant=ORG)
    s.add_user("Write to jane.doe@example.com please")
    before = snapshot(keep, s)
    preview = keep.compressor.preview_history(s, SYSTEM)
    assert "jane.doe@example.com" not in str(list(preview))
    assert snapshot(keep, s) == before


def test_a_preview_takes_the_same_arguments(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    with pytest.raises(InvalidArgument):
        keep.compressor.preview_history(s, None)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgument):
        keep.compressor.preview_history(None, SYSTEM)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgument):
        keep.compressor.preview_history(s, SYSTEM, memories=5)  # type: ignore[call-overload]
    shown = keep.compressor.preview_history(s, SYSTEM, memories=["likes tea"])
    assert "likes tea" in shown[0]["content"]
