"""Shared by the egress property test and the worker-process test: the personal values, the
surface forms they are written in, the model played on the recording server, and the one
check that no raw form of any value left.

"Raw" is read broadly: the value as written, upper and lower case, without separators,
digits only (for the numeric ones), a name's surname alone, and, over the normalised view
of the text (``surface_view``: JSON and percent escapes decoded, NFKC, case and accents
folded), the normalised view of the value. A body whose JSON escapes spell the value
(``ana.garcia\\u0040example.com``) or whose URL encodes it (``ana.garcia%40example.com``)
fails the check like the plain text would.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from chatkeep.memory.prompts import DECIDE_SYSTEM
from chatkeep.privacy.surface import surface_view
from chatkeep.testing import Reply

#: Values of each kind, all detected by the built-in recognizers when written plain (a name
#: only after "my name is").
POOLS: dict[str, tuple[str, ...]] = {
    "email": ("ana.garcia@example.com", "bob.stone+billing@mail.example.org"),
    "phone": ("07700 900123", "+34 612 345 678", "(212) 555-0187"),
    "ssn": ("536-22-1234",),
    "card": ("4111 1111 1111 1111", "5500 0000 0000 0004"),
    "iban": ("GB82 WEST 1234 5698 7654 32", "DE89 3704 0044 0532 0130 00"),
    "name": ("Margarethe Vandenberghe", "María José Núñez", "Oskar Lindqvist"),
}
KINDS = tuple(POOLS)
#: How a value is written where it is placed.
FORMS = ("plain", "upper", "lower", "json_u", "url")
PLACEHOLDER = re.compile(r"<[A-Z_]+_\d+>")
#: Prose a summarizer or distiller writes around the placeholders it was shown.
REWORDINGS = ("Customer's mobile no. {p}.", "Identity verified with {p}.", "ref {p}",
              "({p})", "{p}, confirmed", "see {p} above")


def written(value: str, form: str) -> str:
    """``value`` in surface ``form``: as typed, upper or lower case, every character that is
    not an ASCII letter or digit JSON-escaped (``\\u0040``), or percent-encoded."""
    if form == "plain":
        return value
    if form == "upper":
        return value.upper()
    if form == "lower":
        return value.lower()
    if form == "json_u":
        return "".join(c if c.isascii() and c.isalnum() else f"\\u{ord(c):04x}" for c in value)
    if form == "url":
        return urllib.parse.quote(value, safe="")
    raise ValueError(form)


def raw_forms(value: str, kind: str) -> set[str]:
    """Literal forms of ``value`` that must not appear (compared case-insensitively)."""
    forms = {value, value.replace(" ", ""), re.sub(r"[\s\-()]", "", value)}
    if kind in ("phone", "ssn", "card"):
        forms.add(re.sub(r"\D", "", value))
    if kind == "name":
        forms.add(value.split()[-1])  # the surname alone
    return {f.casefold() for f in forms if len(f) >= 4}


def normalised_forms(value: str, kind: str) -> set[str]:
    """Forms of ``value`` to look for in the normalised view of a text."""
    forms = {surface_view(value).text}
    if kind == "name":
        forms.add(surface_view(value.split()[-1]).text)
    return forms


def leaks(text: str, values: Mapping[str, str]) -> list[str]:
    """Every raw form of a value found in ``text`` (empty: none)."""
    found: list[str] = []
    folded = text.casefold()
    view = surface_view(text).text
    for kind, value in values.items():
        for form in sorted(raw_forms(value, kind)):
            if form in folded:
                found.append(f"{kind} {value!r} as {form!r}")
        for form in sorted(normalised_forms(value, kind)):
            if form in view:
                found.append(f"{kind} {value!r} in the normalised view as {form!r}")
    return found


def excerpt(text: str, values: Mapping[str, str], width: int = 160) -> str:
    """Where in ``text`` the first leaked form sits (for a failure message)."""
    view = surface_view(text).text
    for kind, value in values.items():
        for form in [*raw_forms(value, kind), *normalised_forms(value, kind)]:
            for haystack in (text.casefold(), view):
                at = haystack.find(form)
                if at >= 0:
                    start = max(0, at - width)
                    return haystack[start:at + len(form) + width]
    return text[:2 * width]


def assert_never_raw(texts: Iterable[tuple[str, str]], values: Mapping[str, str]) -> None:
    """``texts``: (what it is, the text). No raw or normalised form of any value in any."""
    for what, text in texts:
        found = leaks(text, values)
        assert not found, (f"{what}: raw value left: {found}\n"
                           f"...{excerpt(text, values)}...")


def sent_history(history: Any) -> str:
    """Everything a built history would send: its messages, and Anthropic's system text."""
    return json.dumps([list(history), getattr(history, "system", "")], ensure_ascii=False)


class ModelPlayer:
    """Plays the summarizer and the distiller on the recording server: it writes back the
    placeholders it was shown in unlabelled prose (so they are redacted again only because
    the vault knows them), and, as the distiller, also any ``model_written`` texts (a model
    writing a raw value into a memory). Records which kind of request it answered."""

    def __init__(self, model_written: Iterable[str] = ()) -> None:
        self.model_written = list(model_written)
        self.asked: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or [{}]
        system = messages[0].get("content") if isinstance(messages[0], dict) else None
        system = system if isinstance(system, str) else ""
        # The placeholders of the conversation (not the prompt's own examples).
        shown = sorted(set(PLACEHOLDER.findall(json.dumps(messages[1:]))))
        prose = " ".join(REWORDINGS[i % len(REWORDINGS)].format(p=p)
                         for i, p in enumerate(shown[:6]))
        if "running summary" in system:
            self.asked.append("summary")
            return Reply.ok(f"The customer called. {prose}".strip())
        if system.startswith("You extract durable memories"):
            self.asked.append("extract")
            facts = [{"scope": "personal", "content": f"Contact detail: {p}"} for p in shown]
            facts += [{"scope": "personal", "content": f"Noted by the model: {text}"}
                      for text in self.model_written]
            facts.append({"scope": "tenant", "content": f"Account notes: {prose}".strip()})
            return Reply.json({"facts": facts})
        if system == DECIDE_SYSTEM:
            self.asked.append("decide")
            items = json.loads(messages[1]["content"])["new_facts"]
            return Reply.json({"decisions": [{"fact": i["fact"], "event": "ADD"}
                                             for i in items]})
        self.asked.append("other")
        return Reply.ok("ok")
