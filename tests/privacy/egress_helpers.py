"""Shared by the egress property test and the worker-process test: the personal values, the
surface forms they are written in, the model played on the recording server, and the one
check that no raw form of any value left.

"Raw" is read broadly: the value as written, upper and lower case, without separators,
digits only (for the numeric ones), a name's surname alone, and, over the normalised view
of the text (``surface_view``: JSON and percent escapes decoded, NFKC, case and accents
folded), the normalised view of the value. A body whose JSON escapes spell the value
(``ana.garcia\\u0040example.com``) or whose URL encodes it (``ana.garcia%40example.com``)
fails the check like the plain text would, and so does every other surface form the
redaction reads (issue 30, item 7): the view decodes HTML references and drops markup and
maps look-alike letters, the text's base64, base64url and hex runs are decoded and checked
too (``surface_view``'s segments), and the text is also checked with the separators of a
spelt-out value squeezed out and an e-mail's ``[at]``/``dot`` words put back.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from chatkeep import Chatkeep
from chatkeep.memory.embedders import HashEmbedder
from chatkeep.memory.prompts import DECIDE_SYSTEM
from chatkeep.privacy.surface import SurfaceView, surface_view
from chatkeep.testing import FakeOpenAIServer, Reply

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
#: The forms of issue 30, item 7 (drawn by the core property test beside ``FORMS``).
MORE_FORMS = ("html", "markup", "base64", "jwt", "hex", "scraper", "spaced", "user_name",
              "look_alike")
ALL_FORMS = FORMS + MORE_FORMS
#: Latin letters written with a Greek or Cyrillic look-alike.
_LOOK_ALIKES = str.maketrans({"A": "\u0391", "O": "\u039f", "a": "\u0430", "o": "\u043e",
                              "e": "\u0435", "E": "\u0395", "i": "\u0456"})
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
    return _written_more(value, form)


def _written_more(value: str, form: str) -> str:
    """The forms of issue 30, item 7: every character that is not an ASCII letter or digit
    as an HTML reference (``@`` by name); markup inside; base64; a JWT payload; hex; an
    e-mail with ``[at]``/``[dot]`` words; letters spaced out; a name's words joined by
    ``_``; look-alike letters of other scripts."""
    if form == "html":
        return "".join("&commat;" if c == "@" else c if c.isascii() and c.isalnum()
                       else f"&#{ord(c)};" for c in value)
    if form == "markup":
        words = value.split(" ")
        if len(words) > 1:
            return " ".join(f"<b>{w}</b>" for w in words)
        half = len(value) // 2
        return f"{value[:half]}<i>{value[half:]}</i>"
    if form == "base64":
        return base64.b64encode(value.encode()).decode()
    if form == "jwt":
        claims = json.dumps({"sub": value, "iat": 1700000000}, ensure_ascii=False)
        payload = base64.urlsafe_b64encode(claims.encode()).decode().rstrip("=")
        return f"eyJhbGciOiJIUzI1NiJ9.{payload}.c2lnbmF0dXJl"
    if form == "hex":
        return value.encode().hex()
    if form == "scraper":
        if "@" not in value:
            return value
        local, domain = value.split("@")
        return f"{local} [at] {domain.replace('.', ' [dot] ')}"
    if form == "spaced":
        return "  ".join(" ".join(word) for word in value.split())
    if form == "user_name":  # a name's words (other values are not written so)
        words = value.split()
        return "_".join(words) if len(words) > 1 and all(w.isalpha() for w in words) \
            else value
    if form == "look_alike":
        return value.translate(_LOOK_ALIKES)
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


#: What a value spelt out puts between its letters, and an e-mail's words for "@" and ".".
_SPELT = re.compile(r"[\s._*\-]+")
_AT_WORD = re.compile(r"\s*[\[({]\s*at\s*[\])}]\s*|\s+at\s+")
_DOT_WORD = re.compile(r"\s*[\[({]\s*dot\s*[\])}]\s*|\s+dot\s+")


def leaks(text: str, values: Mapping[str, str]) -> list[str]:
    """Every raw form of a value found in ``text`` (empty: none)."""
    found: list[str] = []
    folded = text.casefold()
    view = surface_view(text)
    views = [("the normalised view", view.text), *_decoded_views(view)]
    squeezed = _SPELT.sub("", view.text)
    words_back = _DOT_WORD.sub(".", _AT_WORD.sub("@", view.text))
    for kind, value in values.items():
        for form in sorted(raw_forms(value, kind)):
            if form in folded:
                found.append(f"{kind} {value!r} as {form!r}")
        for form in sorted(normalised_forms(value, kind)):
            for where, text_view in views:
                if form in text_view:
                    found.append(f"{kind} {value!r} in {where} as {form!r}")
            if kind == "email" and form in words_back:
                found.append(f"{kind} {value!r} with its [at]/dot words as {form!r}")
            if len(_SPELT.sub("", form)) >= 6 and _SPELT.sub("", form) in squeezed:
                found.append(f"{kind} {value!r} spelt out as {_SPELT.sub('', form)!r}")
    return found


def _decoded_views(view: SurfaceView) -> list[tuple[str, str]]:
    """The views of every encoded run (base64, base64url, hex), nested ones too."""
    out: list[tuple[str, str]] = []
    for segment in view.segments:
        out.append((f"an encoded run ({segment.text[:40]!r})", segment.view.text))
        out.extend(_decoded_views(segment.view))
    return out


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


@dataclass
class World:
    """A keep and the recording fake server behind it, played by a :class:`ModelPlayer`."""

    keep: Chatkeep
    server: FakeOpenAIServer
    player: ModelPlayer


def open_world(folder: Path, model_written: Iterable[str] = (), *,
               budget: int = 500) -> World:
    """A keep on a fresh SQLite file in ``folder``, privacy on, a small budget (the
    summarizer folds), memories recalled with embeddings; its model and embedding endpoint
    the recording server played by a :class:`ModelPlayer` (``model_written``: what it
    writes into memories as the distiller)."""
    player = ModelPlayer(model_written)
    server = FakeOpenAIServer(responder=player,
                              embedder=HashEmbedder(64, model="fake-embed")).start()
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=10.0)
    keep = Chatkeep(f"sqlite:///{folder / 'chat.db'}", model=client, dispatcher="inline",
                    config={"privacy": {"anonymize_pii": True},
                            "chat": {"max_history_tokens": budget, "recent_messages_min": 1},
                            "memory": {"recall_in_history": True,
                                       "embedding_model": "fake-embed",
                                       "embedding_base_url": server.base_url,
                                       "embedding_api_key": "k"},
                            "llm": {"max_retries": 0}})
    return World(keep, server, player)
