"""build_history at the edges (issue 22): a summarizer reply that cannot be stored, a
retraction racing a fold, and arguments of the wrong type; on both APIs and both stores."""

from __future__ import annotations

import re
from collections.abc import Callable

import openai
import pytest
from history_helpers import BUDGET, ORG, SYSTEM, fill

from chatkeep import Chatkeep, InvalidArgument
from chatkeep.formats.base import unfence
from chatkeep.testing import FakeOpenAIServer, Reply

# -- 1. a reply that cannot be stored is a failed fold -------------------------------------


@pytest.mark.parametrize("bad", ["SUMMARY \x00 WITH NUL", "SUMMARY \ud800 SURROGATE",
                                 '{"add": [{"type": "fact", "text": "a \\u0000 b"}]}',
                                 '{"narrative": "lone \\ud800 surrogate"}'],
                         ids=["nul", "surrogate", "nul-in-item", "surrogate-in-json"])
def test_a_summary_reply_that_cannot_be_stored_is_a_failed_fold(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI,
        llm_server: FakeOpenAIServer, bad: str, caplog: pytest.LogCaptureFixture) -> None:
    keep = make_keep(model=openai_client, config=BUDGET)
    s = keep.sessions.create(tenant=ORG)
    fill(s, 10)
    llm_server.script(Reply.ok("GOOD SUMMARY"))
    keep.compressor.build_history(s, SYSTEM)
    s = keep.sessions.get_unscoped(s.id)
    old_watermark = s.summary_watermark
    assert s.summary == "GOOD SUMMARY" and old_watermark > 0

    fill(s, 10, start=50)
    asked = len(llm_server.requests)
    llm_server.script(Reply.ok(bad))
    for turn in range(3):  # no turn raises; after the failure the session backs off
        history = keep.compressor.build_history(s, SYSTEM)
        if turn == 0:
            assert history.info.summary_failed
        else:
            assert history.info.fold_deferred and "backing off" in history.info.fold_deferred
        assert history.info.fold_retry_at is not None, turn
        assert unfence(history[1]["content"]).endswith("GOOD SUMMARY")
        expected = [m.content for m in s.messages_after(old_watermark) if m.replay_text]
        assert [m["content"] for m in history[2:]] == expected
        s.add_user(f"follow-up {turn}")
    assert "summarizer failed" in caplog.text
    assert len(llm_server.requests) == asked + 1  # the back-off spared two calls
    stored = keep.sessions.get_unscoped(s.id)
    assert (stored.summary, stored.summary_watermark) == ("GOOD SUMMARY", old_watermark)


# -- 9. a retraction takes part in the summary's compare-and-set ---------------------------


def test_a_message_retracted_while_a_fold_is_in_flight_never_reaches_the_summary(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI,
        llm_server: FakeOpenAIServer) -> None:
    keep = make_keep(model=openai_client, config=BUDGET)
    other = make_keep(config=BUDGET)  # another process on the same database
    s = keep.sessions.create(tenant=ORG)
    fill(s, 10)  # seq 1..20; the fold takes 1..16 (all but the last four)
    popped: list[str] = []

    def summarizer(body: dict[str, object]) -> Reply:
        """Echoes the markers of what it was shown; during the first call, the other
        process pops five messages (the protected tail and the fold's newest, A7)."""
        if not popped:
            session = other.sessions.get_unscoped(s.id)
            for _ in range(5):
                message = session.retract_last()
                assert message is not None
                popped.append((message.content or "").split()[0])
        shown = str(body["messages"][-1]["content"])  # type: ignore[index]
        return Reply.ok(" ".join(re.findall(r"\b[UA]\d+\b", shown)))

    llm_server.responder = summarizer
    history = keep.compressor.build_history(s, SYSTEM)
    assert popped == ["A9", "U9", "A8", "U8", "A7"]
    stored = keep.sessions.get_unscoped(s.id)
    assert stored.summary is not None and "U0" in stored.summary
    assert "A7" not in (stored.summary or ""), stored.summary
    assert len(llm_server.requests) == 2  # the first fold lost its compare-and-set
    assert history.compressed
    replayed = " ".join(m["content"] for m in history[1:])
    assert not any(f"{marker} " in replayed for marker in popped)
    # The session's own retraction bumps the version too.
    version = stored.row.summary_version
    stored.retract_last()
    assert keep.sessions.get_unscoped(s.id).row.summary_version == version + 1


# -- 10. arguments of the wrong type are typed errors --------------------------------------


@pytest.mark.parametrize(("memories", "says"), [
    ([1], "memories[0]"), ([None], "memories[0]"), (["fine", b"bytes"], "memories[1]"),
    (5, "memories must be"), ("a string", "memories must be"),
], ids=["int-item", "none-item", "bytes-item", "int", "str"])
def test_memories_of_the_wrong_type_are_an_invalid_argument(
        keep: Chatkeep, memories: object, says: str) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("hi")
    with pytest.raises(InvalidArgument, match=re.escape(says)):
        keep.compressor.build_history(s, SYSTEM, memories=memories)  # type: ignore[arg-type]


@pytest.mark.parametrize("session", [None, "a-session-id", 5], ids=["none", "str", "int"])
def test_a_session_that_is_not_one_is_an_invalid_argument(keep: Chatkeep,
                                                          session: object) -> None:
    with pytest.raises(InvalidArgument, match="session must be"):
        keep.compressor.build_history(session, "")  # type: ignore[arg-type]
