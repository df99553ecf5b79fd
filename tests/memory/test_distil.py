"""Distillation: trigger on compression, input, JSON validation, idempotency, races, billing."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import openai
import pytest
from memory_helpers import ALICE, MATTER, ORG, Player, contents, talk

from chatkeep import Chatkeep, DistillationError, ToolCall
from chatkeep.formats.base import unfence
from chatkeep.jobs import JobHandler, ThreadPoolDispatcher
from chatkeep.memory.prompts import DECIDE_SYSTEM
from chatkeep.sessions import ChatSession
from chatkeep.testing import FakeOpenAIServer, Reply

SMALL_BUDGET = {"chat": {"max_history_tokens": 1000, "recent_messages_min": 4,
                         "summary_max_tokens": 200}}


def fill(session: ChatSession, turns: int) -> None:
    for i in range(turns):
        session.add_user(f"U{i} " + "question " * 40)
        session.add_assistant(f"A{i} " + "answer " * 40)


class RecordingDispatcher:
    """Records jobs instead of running them (what a queue would receive)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, str]] = []
        self.handlers: dict[str, JobHandler] = {}

    def bind(self, handlers: Mapping[str, JobHandler]) -> None:
        self.handlers = dict(handlers)

    def dispatch(self, job: str, session_id: str) -> None:
        self.jobs.append((job, session_id))


# -- 1. trigger -----------------------------------------------------------------------------

@pytest.mark.sync_api  # calls the core's job handler from the test thread
def test_compression_dispatches_distil_with_the_session_id_only(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI,
        player: Player) -> None:
    dispatcher = RecordingDispatcher()
    keep = make_keep(model=openai_client, config=SMALL_BUDGET, dispatcher=dispatcher)
    s = keep.sessions.create(ORG, ALICE, MATTER)
    fill(s, 10)
    keep.compressor.build_history(s, "system")
    assert s.summary == "SUMMARY"
    assert dispatcher.jobs == [("distil", s.id)]
    # the jobs a worker knows: distillation, the fold of a backlog (no job this turn: its
    # fold made one summarizer call, within chat.max_fold_calls_per_turn) and the quota
    # reservations' sweep
    assert set(dispatcher.handlers) == {"distil", "fold", "quota_sweep"}
    # What a worker does with that id alone:
    player.will_extract(("subject", "M-100 is a lease dispute."))
    dispatcher.handlers["distil"](s.id)
    assert contents(keep.memory.recall(s)) == ["M-100 is a lease dispute."]


def test_no_dispatch_when_distil_on_compress_is_off(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI,
        player: Player) -> None:
    dispatcher = RecordingDispatcher()
    keep = make_keep(model=openai_client, dispatcher=dispatcher,
                     config={**SMALL_BUDGET, "memory": {"distil_on_compress": False}})
    s = keep.sessions.create(ORG, ALICE)
    fill(s, 10)
    keep.compressor.build_history(s, "system")
    assert s.summary == "SUMMARY" and dispatcher.jobs == []


@pytest.mark.parametrize("kind", ["inline", "thread"])
@pytest.mark.sync_api  # a thread pool runs sync jobs; the async API runs them as tasks (tests/aio)
def test_compression_distils_through_inline_and_thread_dispatchers(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI, player: Player,
        kind: str) -> None:
    keep = make_keep(model=openai_client, config=SMALL_BUDGET, dispatcher=kind)
    s = keep.sessions.create(ORG, ALICE, MATTER)
    fill(s, 10)
    player.will_extract(("tenant", "Drafts need partner review."))
    keep.compressor.build_history(s, "system")
    if isinstance(keep.dispatcher, ThreadPoolDispatcher):
        keep.dispatcher.wait(timeout=10)
    assert contents(keep.memory.recall(s)) == ["Drafts need partner review."]
    assert s.refresh().row.distilled_through == 20


def test_a_failing_distil_never_breaks_build_history(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI, player: Player,
        caplog: pytest.LogCaptureFixture) -> None:
    keep = make_keep(model=openai_client, config=SMALL_BUDGET)
    s = keep.sessions.create(ORG, ALICE)
    fill(s, 10)
    player.raw_extraction.append(Reply.ok("this is not JSON"))
    history = keep.compressor.build_history(s, "system")
    assert unfence(history[1]["content"]).endswith("SUMMARY")
    assert s.refresh().row.distilled_through == 0
    assert "distillation failed" in caplog.text
    # The server failing outright is no different.
    fill(s, 10)
    player.raw_extraction.append(Reply.error(500))
    keep.compressor.build_history(s, "system")
    assert s.refresh().row.distilled_through == 0


# -- 2. what is distilled ----------------------------------------------------------------

def test_distiller_reads_user_and_assistant_text_only_after_the_watermark(
        mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE, MATTER)
    s.add_user("Pull the lease for M-100.")
    s.add_assistant("Looking it up.",
                    tool_calls=[ToolCall("call_1", "lookup", '{"q": "SECRET-ARG"}')])
    s.add_tool_result("call_1", {"clause": "TOOL-OUTPUT-12.3"})
    s.add_assistant(None, tool_calls=[ToolCall("call_2", "lookup")])
    s.add_tool_result("call_2", "TOOL-OUTPUT-2")
    s.add_assistant("Clause 12.3 needs six months' notice.")
    result = mkeep.memory.distil(s.id)
    assert result.distilled_through == 6
    (request,) = player.extractions
    text = request["messages"][1]["content"]
    assert "User: Pull the lease for M-100." in text
    assert "Assistant: Looking it up." in text
    assert "Assistant: Clause 12.3 needs six months' notice." in text
    for plumbing in ("SECRET-ARG", "TOOL-OUTPUT", "call_1", "lookup"):
        assert plumbing not in json.dumps(request)
    assert request["response_format"] == {"type": "json_object"}
    assert request["model"] == mkeep.config.memory.distil_model
    # Only the new range next time.
    talk(s, "Also: the landlord is Dunmore.", "Noted.")
    mkeep.memory.distil(s.id)
    second = player.extractions[1]["messages"][1]["content"]
    assert "Dunmore" in second and "M-100" not in second


def test_tool_plumbing_only_range_moves_the_watermark_without_a_model_call(
        mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    s.add_assistant(None, tool_calls=[{"id": "c", "type": "function",
                                       "function": {"name": "f", "arguments": "{}"}}])
    s.add_tool_result("c", "result")
    result = mkeep.memory.distil(s.id)
    assert (result.distilled_through, result.model_calls) == (2, 0)
    assert player.extractions == []


@pytest.mark.parametrize("reply", [
    Reply.ok("not json at all"),
    Reply.json(["a", "list"]),
    Reply.json({"facts": "not a list"}),
    Reply.json({"facts": [{"scope": "galaxy", "content": "x"}]}),
    Reply.json({"facts": [{"scope": "tenant", "content": ""}]}),
    Reply.json({"facts": [{"scope": "tenant"}]}),
    Reply.garbage(),
], ids=["text", "list", "facts-not-list", "bad-scope", "empty", "no-content", "garbage"])
def test_a_malformed_extraction_is_an_error_that_leaves_the_watermark(
        mkeep: Chatkeep, player: Player, reply: Reply) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    talk(s, "Our policy: invoices go out monthly.", "Understood.")
    player.raw_extraction.append(reply)
    with pytest.raises(DistillationError):
        mkeep.memory.distil(s.id)
    assert s.refresh().row.distilled_through == 0
    assert mkeep.memory.list(ORG) == []
    # The range is not skipped: the next run reads it again and succeeds.
    player.will_extract(("tenant", "Invoices go out monthly."))
    assert mkeep.memory.distil(s.id).added == 1
    assert "invoices go out monthly" in player.extractions[-1]["messages"][1]["content"]


@pytest.mark.parametrize("decisions", [
    {"decisions": [{"fact": 0, "event": "DELETE", "target": "m9"}]},
    {"decisions": [{"fact": 0, "event": "MERGE", "target": "m1"}]},
    {"decisions": [{"fact": 0, "event": "UPDATE"}]},
    {"decisions": []},
    {"decisions": [{"fact": 3, "event": "ADD"}]},
], ids=["unknown-target", "unknown-event", "update-without-target", "missing", "bad-index"])
def test_a_malformed_decision_writes_nothing(mkeep: Chatkeep, player: Player,
                                             decisions: dict[str, Any]) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    talk(s, "Invoices go out monthly.", "Noted.")
    player.will_extract(("tenant", "Invoices go out monthly."))
    mkeep.memory.distil(s.id)
    talk(s, "Actually invoices now go out weekly.", "Noted.")
    player.will_extract(("tenant", "Invoices go out weekly."))
    player.raw_decision.append(Reply.json(decisions))
    with pytest.raises(DistillationError):
        mkeep.memory.distil(s.id)
    assert s.refresh().row.distilled_through == 2
    assert contents(mkeep.memory.list(ORG, include_superseded=True)) == [
        "Invoices go out monthly."]


def test_offline_distil_refuses_instead_of_inventing_facts(
        make_keep: Callable[..., Chatkeep], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    keep = make_keep()
    assert keep.model is None
    s = keep.sessions.create(ORG, ALICE)
    talk(s, "Remember that I like tea.", "Sure.")
    with pytest.raises(DistillationError, match="no model configured"):
        keep.memory.distil(s.id)
    keep.memory.run_job(s.id)  # the job logs instead of raising
    assert "no model configured" in caplog.text
    assert s.refresh().row.distilled_through == 0
    assert keep.memory.list(ORG) == []


# -- 4. idempotent and ordered -----------------------------------------------------------

def test_rerunning_distil_writes_nothing_new(mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE, MATTER)
    talk(s, "M-100 settles for up to 40k.", "Recorded.")
    player.will_extract(("subject", "M-100 may settle for up to 40,000."),
                        ("personal", "Prefers bullet points."))
    first = mkeep.memory.distil(s.id)
    assert (first.added, first.model_calls) == (2, 1)
    again = mkeep.memory.distil(s.id)
    assert (again.added, again.model_calls, again.chunks) == (0, 0, 0)
    # Even re-reading the same range (a rewound watermark) stores nothing twice,
    # and the model's restatement is caught without a decision call.
    assert mkeep.memory.rewind(s.id)
    player.will_extract(("subject", "M-100 may settle for up to 40,000"),
                        ("personal", "prefers bullet points."))
    rerun = mkeep.memory.distil(s.id)
    assert (rerun.added, rerun.duplicates) == (0, 2)
    assert player.decisions == []
    assert len(mkeep.memory.list(ORG, include_superseded=True)) == 2


def test_two_workers_on_one_session_write_each_fact_once(
        make_keep: Callable[..., Chatkeep], llm_server: FakeOpenAIServer) -> None:
    # A patient client: the first request waits at the barrier for the second.
    client = openai.OpenAI(base_url=llm_server.base_url, api_key="k", max_retries=0,
                           timeout=30)
    barrier = threading.Barrier(2, timeout=20)

    def responder(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == DECIDE_SYSTEM:  # the slower worker saw the
            new_facts = json.loads(body["messages"][1]["content"])["new_facts"]  # rows
            return Reply.json({"decisions": [{"fact": f["fact"], "event": "NONE",
                                              "target": "m1"} for f in new_facts]})
        barrier.wait()  # both workers have read the same watermark before either writes
        return Reply.json({"facts": [{"scope": "tenant", "content": "Deploys need review."},
                                     {"scope": "personal", "content": "Likes Rust."}]})

    llm_server.responder = responder
    keep = make_keep(model=client)
    s = keep.sessions.create(ORG, ALICE)
    talk(s, "Deploys need review; I like Rust.", "Noted.")
    other = make_keep(model=client)  # a second process, in effect
    results = []
    threads = [threading.Thread(target=lambda k=k: results.append(k.memory.distil(s.id)))
               for k in (keep, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert len(results) == 2
    assert sorted(r.lost_races for r in results) == [0, 1]
    assert sorted(r.added for r in results) == [0, 2]
    assert sorted(contents(keep.memory.list(ORG, include_superseded=True))) == [
        "Deploys need review.", "Likes Rust."]
    row = s.refresh().row
    assert (row.distilled_through, row.distil_version) == (2, 1)


def test_long_ranges_are_distilled_in_chunks_each_committed(
        mkeep: Chatkeep, player: Player, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("chatkeep.memory.distiller.CHUNK_TOKENS", 30)
    s = mkeep.sessions.create(ORG, ALICE)
    for i in range(6):
        talk(s, f"point {i} " + "word " * 20, "ok")
    result = mkeep.memory.distil(s.id)
    assert result.chunks > 1 and result.distilled_through == 12
    assert len(player.extractions) == result.chunks


# -- 9. billing --------------------------------------------------------------------------

def test_distiller_usage_is_billed_to_the_sessions_tenant(mkeep: Chatkeep,
                                                          player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    talk(s, "Invoices go out monthly.", "Noted.")
    player.will_extract(("tenant", "Invoices go out monthly."))
    mkeep.memory.distil(s.id)
    talk(s, "Invoices go out weekly now.", "Noted.")
    player.will_extract(("tenant", "Invoices go out weekly."))
    player.decide = lambda facts: [{"fact": 0, "event": "DELETE", "target": "m1"}]
    mkeep.memory.distil(s.id)
    (line,) = [u for u in mkeep.usage(ORG) if u.purpose == "distil"]
    assert (line.prompt_tokens, line.completion_tokens, line.calls) == (250, 50, 3)
    assert s.refresh().total_tokens == mkeep.repository.usage_sum(s.id) == 300


# -- privacy seam ------------------------------------------------------------------------

class EmailEgress:
    """A stand-in for a session's egress: one placeholder, nothing to store."""

    withheld = 0

    def __call__(self, text: str, context: str | None = None) -> str:
        return text.replace("alice@example.com", "<EMAIL_1>")

    def scrub(self, payload: Any) -> Any:
        return json.loads(self(json.dumps(payload)))

    def flush(self) -> bool:
        return True


class EmailFilter:
    """A stand-in for the redactor: one placeholder per session."""

    def for_session(self, session: ChatSession, known: Sequence[str | None] = ()
                    ) -> EmailEgress:
        return EmailEgress()

    def restore(self, session: ChatSession, text: str) -> str:
        return text.replace("<EMAIL_1>", "alice@example.com")

    restore_stored = restore

    def store_form(self, session: ChatSession, text: str) -> str:
        return text

    def sealed_values(self, session: ChatSession, text: str) -> str | None:
        return None


def test_distiller_input_goes_through_the_outbound_filter(
        mkeep: Chatkeep, player: Player, llm_server: FakeOpenAIServer) -> None:
    mkeep.memory.outbound_filter = EmailFilter()
    s = mkeep.sessions.create(ORG, ALICE)
    talk(s, "Send invoices to alice@example.com.", "Will do.")
    player.will_extract(("personal", "Wants invoices sent to <EMAIL_1>."))
    mkeep.memory.distil(s.id)
    assert all("alice@example.com" not in body for body in llm_server.bodies())
    assert "<EMAIL_1>" in player.extractions[0]["messages"][1]["content"]
    # Stored with the real value (placeholders are per session; a memory is not).
    assert contents(mkeep.memory.recall(s)) == ["Wants invoices sent to alice@example.com."]


def test_decision_candidates_go_through_the_outbound_filter(
        mkeep: Chatkeep, player: Player, llm_server: FakeOpenAIServer) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    remember_raw = ("personal", "Invoices go to alice@example.com.")
    talk(s, "Invoices go to alice@example.com.", "ok")
    player.will_extract(remember_raw)
    mkeep.memory.distil(s.id)  # this session did not redact
    mkeep.memory.outbound_filter = EmailFilter()
    talk(s, "Invoices now go to the finance inbox.", "ok")
    player.will_extract(("personal", "Invoices go to the finance inbox."))
    player.decide = lambda facts: [{"fact": 0, "event": "DELETE", "target": "m1"}]
    before = len(llm_server.bodies())
    mkeep.memory.distil(s.id)
    assert player.decisions[0][0]["memories"][0]["text"] == "Invoices go to <EMAIL_1>."
    assert all("alice@example.com" not in b for b in llm_server.bodies()[before:])


def test_log_names_the_session_on_lost_model(mkeep: Chatkeep, player: Player,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="chatkeep")
    s = mkeep.sessions.create(ORG, ALICE)
    talk(s, "hello", "hi")
    player.raw_extraction.append(Reply.error(503))
    with pytest.raises(DistillationError, match=s.id):
        mkeep.memory.distil(s.id)
