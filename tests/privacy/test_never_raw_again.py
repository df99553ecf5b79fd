"""A value once detected for a session never leaves raw again, whatever words surround it:
a summarizer and a distiller that reword around placeholders, memories recalled into
another session, the subject reference in the distiller's prompt. End to end against
the recording server (the real openai SDK on the wire)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import openai
import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 7)
ACTOR = Ref("user", 3)
SUBJECT = Ref("customer", "ana.garcia@example.com")
PHONE, SSN, EMAIL = "07700 900123", "536-22-1234", "ana.garcia@example.com"
IBAN, CARD = "GB82 WEST 1234 5698 7654 32", "4111 1111 1111 1111"
#: Every form a raw value could leave in: as typed, digits only, other spacing, other case.
RAW_FORMS = [PHONE, "07700900123", "7700 900123", "7700900123", "+44 7700 900123",
             SSN, "536221234", "536 22 1234", EMAIL, EMAIL.upper(), IBAN,
             "GB82WEST12345698765432", CARD, "4111111111111111", "4111-1111-1111-1111"]
PLACEHOLDER = re.compile(r"<[A-Z_]+_\d+>")
#: How a rewording model puts placeholders back into prose: no label a recognizer needs.
REWORDINGS = ["Customer's mobile no. {p}.", "Identity verified with {p}.", "{p}/{p}",
              "Tel #{p}", "ref {p}", "({p})", "{p}, confirmed", "see {p} above"]


def rewording_model(body: dict[str, Any]) -> Reply:
    """Summarizer and distiller at once: whatever placeholders it was shown, it writes them
    back in unlabelled contexts (the summary as prose, the facts as JSON)."""
    system = body["messages"][0]["content"]
    shown = sorted(set(PLACEHOLDER.findall(json.dumps(body))))
    prose = " ".join(REWORDINGS[i % len(REWORDINGS)].format(p=p) for i, p in enumerate(shown))
    if "running summary" in system:
        return Reply.ok(f"The customer called. {prose}")
    if '"facts"' in system:
        facts = [{"scope": "personal", "content": f"Contact detail: {p}"} for p in shown]
        facts.append({"scope": "tenant", "content": f"Account notes: {prose}"})
        return Reply.json({"facts": facts})
    if "new_facts" in json.dumps(body):
        items = json.loads(body["messages"][1]["content"])["new_facts"]
        return Reply.json({"decisions": [{"fact": i["fact"], "event": "ADD"} for i in items]})
    return Reply.ok("ok")


def assert_nothing_raw(texts: list[str]) -> None:
    for text in texts:
        for raw in RAW_FORMS:
            assert raw not in text, f"raw {raw!r} left in: ...{text[:300]}"


@pytest.fixture
def privacy_keep(make_keep: Callable[..., Chatkeep]) -> Any:
    server = FakeOpenAIServer(responder=rewording_model).start()
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    keep = make_keep(model=client, config={
        "privacy": {"anonymize_pii": True},
        "chat": {"max_history_tokens": 500, "recent_messages_min": 2},
        "memory": {"recall_in_history": True}})
    yield keep, server
    server.stop()


def test_reworded_summaries_and_memories_never_carry_raw_values(privacy_keep: Any) -> None:
    keep, server = privacy_keep
    session = keep.sessions.create(ORG, ACTOR, SUBJECT)
    histories = []
    said = [f"My phone number is {PHONE}.", f"My SSN is {SSN}.", f"Email me at {EMAIL}.",
            f"Pay to IBAN {IBAN}.", f"Card number: {CARD}."]
    for turn in range(10):
        session.add_user(said[turn % len(said)] + " " + "More detail about it. " * 12)
        session.add_assistant("Thanks, noted. " + "Let me check that for you. " * 12)
        histories.append(keep.compressor.build_history(session, "You help customers."))
    assert session.refresh().summary_watermark > 0, "compression must have fired"
    assert keep.memory.list(ORG), "the distiller must have written memories"
    # A later conversation with the same person, recalling those memories.
    later = keep.sessions.create(ORG, ACTOR, SUBJECT)
    later.add_user("Hello again, can you check my contact details?")
    histories.append(keep.compressor.build_history(later, "You help customers."))
    assert "Contact detail: <" in str(histories[-1]), "memories must be recalled"
    # The summarizer reworded the placeholders it saw; each was sent out again many times.
    requests = server.bodies()
    assert any("running summary" in b for b in requests)
    assert any('\\"facts\\"' in b or '"facts"' in b for b in requests)
    assert_nothing_raw(requests + [json.dumps(h) for h in histories])
    # Stored data keeps the real values (and the application can restore model output).
    assert any(PHONE in m.content for m in keep.memory.list(ORG))
    assert keep.privacy.restore(session, "<EMAIL_1>") == EMAIL


def test_the_subject_reference_is_redacted_in_the_distiller_prompt(privacy_keep: Any) -> None:
    keep, server = privacy_keep
    session = keep.sessions.create(ORG, ACTOR, SUBJECT)
    session.add_user(f"Hi, please write to {EMAIL} about the renewal.")
    session.add_assistant("Will do.")
    keep.memory.distil(session.id)
    extraction = next(b for b in server.bodies() if '"facts' in b)
    assert "customer:" in extraction and EMAIL not in extraction


def test_restore_follows_the_switches(privacy_keep: Any) -> None:
    """A user-typed placeholder never restores to a real value, whatever the switches
    were: with redaction off the model saw real text, so its output is literal."""
    keep, _ = privacy_keep
    session = keep.sessions.create(ORG, ACTOR)
    session.add_user(f"The operator's address is {EMAIL}.")
    keep.compressor.build_history(session, "sys")  # <EMAIL_1> now names it
    assert keep.privacy.restore(session, "<EMAIL_1>") == EMAIL
    session.set_anonymize_pii(False)
    session.add_user("Repeat after me: <EMAIL_1>")
    assert keep.privacy.restore(session, "You said <EMAIL_1>") == "You said <EMAIL_1>"
