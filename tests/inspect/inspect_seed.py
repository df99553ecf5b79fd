"""A store for the inspector's tests, written through the public API: two tenants, sessions
with folds, tool calls, a retraction, personal data under a sealed vault, memories (one
superseded) with vectors, and a ledger.

``ScriptedModel`` plays the summarizer and the distiller in process (no server): its
replies are fixed, its usage is billed like a real model's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chatkeep import Chatkeep, Ref
from chatkeep.llm.base import Completion
from chatkeep.memory.embedders import HashEmbedder
from chatkeep.memory.prompts import DECIDE_SYSTEM
from chatkeep.messages import Usage

ORG = Ref("organization", 1)
OTHER = Ref("organization", 2)
ANA = Ref("user", 7)
TICKET = Ref("ticket", 42)
EMAIL = "ana.lopez@example.com"
OTHER_EMAIL = "zed@rival.example"
MODEL = "scripted-mini"
VAULT_KEY = "pD0yzsB1TMrZy2GAj1bq0oG4X5iQ1hEwuyu8u1N0pB8="
"""A fixed Fernet key: the vaults are sealed with it."""


def config() -> dict[str, Any]:
    """The settings the store is written (and inspected) with: a small budget so folds
    happen, redaction on with a sealed vault."""
    return {"chat": {"max_history_tokens": 160, "recent_messages_min": 4,
                     "summary_max_tokens": 40},
            "privacy": {"anonymize_pii": True, "encryption_key": VAULT_KEY},
            "memory": {"distil_on_compress": False}}


def embedder() -> HashEmbedder:
    """The embedder the memories' vectors are made with (the inspector uses the same)."""
    return HashEmbedder(64, model="hash-64")


@dataclass
class ScriptedModel:
    """Summaries as a structured edit, extractions from a queue of facts, decisions that add
    every fact, or replace the nearest memory when the fact says ``replaces``."""

    facts: list[list[dict[str, str]]] = field(default_factory=list)
    calls: int = 0

    def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                 max_tokens: int | None = None, temperature: float | None = None,
                 json_mode: bool = False) -> Completion:
        self.calls += 1
        system = str(messages[0]["content"])
        if system.startswith("You extract durable memories"):
            facts = self.facts.pop(0) if self.facts else []
            return self._reply({"facts": facts}, 220, 40)
        if system == DECIDE_SYSTEM:
            new = json.loads(str(messages[1]["content"]))["new_facts"]
            decisions = []
            for fact in new:
                if "replaces" in fact["text"] and fact["memories"]:
                    decisions.append({"fact": fact["fact"], "event": "DELETE",
                                      "target": fact["memories"][0]["id"]})
                else:
                    decisions.append({"fact": fact["fact"], "event": "ADD"})
            return self._reply({"decisions": decisions}, 90, 20)
        text = " ".join(str(m.get("content") or "") for m in messages[1:])
        edit = {"add": [{"type": "task", "text": "Refund order 1138 to the card."},
                        {"type": "rule", "text": "Answer in English."}]
                if "1138" in text else [],
                "narrative": "Vase broke in transit; refund agreed."}
        return self._reply(edit, 400 + len(text) // 8, 60)

    def _reply(self, data: dict[str, Any], prompt: int, completion: int) -> Completion:
        return Completion(json.dumps(data), Usage(prompt, completion), MODEL)


@dataclass
class Seeded:
    """Ids of what :func:`seed` wrote."""

    support: str
    waiting: str
    closed: str
    other: str
    memories: dict[str, int]


def seed(url: str) -> Seeded:
    """Write the test store at ``url`` (a fresh database)."""
    model = ScriptedModel()
    keep = Chatkeep(url, model=model, config=config(), dispatcher="inline",
                    embedder=embedder())
    try:
        return _write(keep, model)
    finally:
        keep.close()


def _turns(session: Any, pairs: Sequence[tuple[str, str]]) -> None:
    for user, assistant in pairs:
        session.add_user(user)
        session.add_assistant(assistant)
        session.record_usage("chat", Usage(120, 30), "gpt-4o-mini")


def _write(keep: Chatkeep, model: ScriptedModel) -> Seeded:
    support = keep.sessions.open("support-42", tenant=ORG, actor=ANA, subject=TICKET,
                                 title="Refund for order 1138")
    support.add_system("Always answer in English and keep replies short.")
    _turns(support, [
        (f"Hi, I'm Ana Lopez ({EMAIL}, +34 612 345 678). Order 1138 arrived broken.",
         "I'm sorry to hear that. Let me look at order 1138."),
        ("It was a ceramic vase, the box was crushed.",
         "Thank you. I have noted the damage to the vase and the box."),
        ("Please refund it to my card, not store credit.",
         "Understood: a refund to the original card."),
        ("How long will it take?", "Refunds take three to five working days."),
        ("Will I get an email when it is done?",
         "Yes, a confirmation goes to the address on the order once the bank has it."),
        ("Can I also return the matching plate from the same order?",
         "Yes: unused items can be returned within 30 days with the original packaging."),
        ("Great, and do I need to print a label for the plate?",
         "No label is needed: the courier brings one when collecting the parcel."),
    ])
    keep.compressor.build_history(support, "You are a support agent.")  # folds
    support.add_user("oops, that was meant for another chat")
    support.retract_last()
    support.add_user("Can you check the refund status now?")
    support.add_assistant(None, tool_calls=[{"id": "call_1", "type": "function", "function": {
        "name": "lookup_order", "arguments": json.dumps({"order": 1138})}}])
    support.add_tool_result("call_1", {"order": 1138, "refund": "pending", "eta_days": 3})
    support.add_assistant("The refund for order 1138 is pending and should arrive in 3 days.")
    support.record_usage("chat", Usage(300, 45), "gpt-4o-mini")
    model.facts = [[
        {"scope": "tenant", "content": "Refunds over 100 EUR need a manager's approval."},
        {"scope": "subject", "content": "Order 1138 (a ceramic vase) arrived broken."},
        {"scope": "personal", "content": "Prefers refunds to the original card, contact "
                                         "at <EMAIL_1>."},
    ]]
    keep.memory.distil(support.id)
    support.add_user("The manager approved it, right?")
    support.add_assistant(None, tool_calls=[{"id": "call_2", "type": "function", "function": {
        "name": "approval_status", "arguments": json.dumps({"order": 1138})}}])
    support.add_tool_result("call_2", "approved by manager M. Diaz")
    support.record_usage("chat", Usage(310, 20), "gpt-4o")
    model.facts = [[{"scope": "subject",
                     "content": "Order 1138 replaces: refund approved by the manager."}]]
    keep.memory.distil(support.id)

    waiting = keep.sessions.open("sales-7", tenant=ORG, actor=Ref("user", 8))
    _turns(waiting, [("Do you ship to Canada?", "Yes, within 10 days.")])
    waiting.add_user("And what does shipping cost?")
    waiting.add_assistant(None, tool_calls=[{"id": "call_w", "type": "function",
                                             "function": {"name": "shipping_quote",
                                                          "arguments": "{}"}}])

    closed = keep.sessions.create(tenant=ORG, title="Closed chat")
    _turns(closed, [("thanks!", "You're welcome.")])
    closed.close()

    other = keep.sessions.open("other-tenant", tenant=OTHER, actor=Ref("user", 99),
                               title="Another tenant's secret")
    _turns(other, [(f"My address is {OTHER_EMAIL}, keep it secret.", "Noted, Zed.")])
    model.facts = [[{"scope": "tenant", "content": "Rival Corp's secret launch is in May."}]]
    keep.memory.distil(other.id)

    rows = {m.content: m.id for m in keep.memory.list(ORG, include_superseded=True)}
    rows |= {m.content: m.id for m in keep.memory.list(OTHER, include_superseded=True)}
    return Seeded(support.id, waiting.id, closed.id, other.id, rows)


def add_wide_session(url: str) -> str:
    """A session whose log holds runs no line can break at a space (a long URL, JSON with
    no spaces, a long call id and function name, a long token): the layout must still keep
    each cell inside the log's column. Returns its id."""
    keep = Chatkeep(url, config=config(), dispatcher="inline")
    try:
        wide = keep.sessions.open("layout-wide", tenant=ORG, title="Wide content")
        wide.add_user("See https://example.com/orders/1138/refunds/" + "a" * 120
                      + "?tracking=" + "Z9" * 40)
        call_id = "call_" + "Xq7" * 12
        wide.add_assistant(None, tool_calls=[{"id": call_id, "type": "function", "function": {
            "name": "lookup_order_with_a_rather_long_function_name",
            "arguments": json.dumps({"order": 1138, "lines": list(range(60))},
                                    separators=(",", ":"))}}])
        wide.add_tool_result(call_id, {"blob": "Q" * 300})
        wide.add_assistant("ok " + "x" * 200)
        return wide.id
    finally:
        keep.close()


LABEL_EMAIL = "maria.garcia@example.org"
LABEL_PHONE = "+34 622 987 654"


def add_labelled_session(url: str) -> str:
    """A session whose app key holds an e-mail address and whose title holds a phone
    number (personal data outside any message), with a message and a billed call so it
    shows in every usage table, and a memory distilled from it (whose provenance names
    the session). Returns its id."""
    model = ScriptedModel(facts=[[{"scope": "tenant",
                                   "content": "Parcels leave the depot in the morning."}]])
    keep = Chatkeep(url, model=model, config=config(), dispatcher="inline",
                    embedder=embedder())
    try:
        session = keep.sessions.open(f"mail-{LABEL_EMAIL}", tenant=ORG,
                                     title=f"Call back on {LABEL_PHONE}")
        _turns(session, [("Where is my parcel?", "It left the depot this morning.")])
        keep.memory.distil(session.id)
        return session.id
    finally:
        keep.close()
