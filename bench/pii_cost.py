"""What redaction costs: per ``build_history`` turn, and per surface-form family.

Two sections of ``bench/pii.py`` (``--only turn,surface``, or ``--only redaction`` for
both), kept here because they need a database and a session rather than labelled sets.

**Redaction cost per turn.** One ``Chatkeep`` on a temporary SQLite file with
``privacy.anonymize_pii`` on holds two sessions with the same 100 messages after the
watermark (no summary): closed turns of user and assistant text, some answered with a
tool call and its result, and an open last turn of parallel tool calls with their
results (replayed verbatim, arguments and results included). The texts carry e-mail
addresses, phone numbers, names (introduced with a cue, "my name is", then repeated
without one) and card numbers, between messages with none. One session redacts, the
other was created with its own switch off, so both build the same request on the same
database and only redaction differs. The budget (``chat.max_history_tokens``) is large
enough that nothing folds. Calls alternate between the two sessions (the order flips
each repetition) so a burst of load elsewhere hits both alike; each call is timed in CPU
time (``time.process_time``: ``best_time`` reports wall time only) and in wall time.
The redacting session's first call allocates the placeholders and stores the vault; it
is reported on its own, and the steady state (vault stored, every later call) is what
the ratio and the target (redaction at most 2x the turn's CPU) are judged on: the median
of the interleaved repetitions, best-of printed beside it.

**Surface-form families.** A vault of 22 known values (five people's names, e-mails,
phones and cards, an IBAN and an SSN) and a ~10 KB text per family in which those values
reappear in one surface form: as written (ASCII), JSON-escaped (``Garc\\u00eda``),
percent-encoded URLs, other case and no accents, surname first, fullwidth digits, and the
forms of issue 30 (HTML character references, markup inside a value, base64 and base64url
JWT payloads, hex, an e-mail's ``[at]``/``dot`` words, letters spaced out, user names,
look-alike Greek and Cyrillic letters). Each
text is redacted with ``Redactor.redact`` (recognizers plus the vault's values in every
form) and, separately, only searched for the vault's values (``find_known``, the
surface-form work alone); ms per KB, best and median.
"""

from __future__ import annotations

import base64
import cProfile
import gc
import json
import os
import pstats
import statistics
import tempfile
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from chatkeep import Chatkeep, Ref, ToolCall
from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault
from chatkeep.sessions import ChatSession

SYSTEM = "You are the support assistant of Example Ltd. Be brief and precise."
TURN_MESSAGES = 100
TARGET = 2.0
SURFACE_CHARS = 10 * 1024


@dataclass(frozen=True)
class Person:
    name: str
    email: str
    phone: str
    card: str

    @property
    def first(self) -> str:
        return self.name.split()[0]

    def values(self) -> list[tuple[str, str]]:
        return [("PERSON", self.name), ("EMAIL", self.email), ("PHONE", self.phone),
                ("CREDIT_CARD", self.card)]


CAST = (
    Person("Ana García", "ana.garcia@example.com", "+34 612 345 678", "4111 1111 1111 1111"),
    Person("Oliver Smith", "oliver.smith@example.net", "+44 20 7946 0958",
           "5555 5555 5555 4444"),
    Person("José Luis Pérez", "jl.perez@example.org", "+33 6 12 34 56 78",
           "3782 822463 10005"),
    Person("Mary Johnson", "mary.johnson@example.com", "+1 202 555 0143",
           "4012 8888 8888 1881"),
    Person("Zoë Müller", "zoe.mueller@example.de", "+49 30 901820", "6011 1111 1111 1117"),
)
EXTRA_VALUES = (("IBAN", "GB82 WEST 1234 5698 7654 32"), ("US_SSN", "536-22-1234"))

FILLER = ("The customer asked about the delivery window for the replacement unit, and we "
          "agreed to confirm the slot by the end of the week once the warehouse replies.")
CLAUSE = ("Clause 4.2 lets either party end the agreement with thirty days' written notice; "
          "notice sent after the 15th takes effect from the first day of the next month, "
          "and fees already invoiced stay due.")


# -- output -----------------------------------------------------------------------------

def render(title: str, header: Sequence[str], rows: Sequence[Sequence[str]],
           notes: Sequence[str], markdown: bool) -> str:
    """A table with a title and notes: Markdown (``--markdown``), or aligned plain text.
    The first column is left-aligned, the others right-aligned."""
    tail = ["", *notes] if notes else []
    if markdown:
        lines = [f"### {title}", "", "| " + " | ".join(header) + " |",
                 "|---|" + "---:|" * (len(header) - 1)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join([*lines, *tail])
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i])
                         for i, cell in enumerate(cells)).rstrip()

    lines = [title, "=" * len(title), line(header), line(["-" * w for w in widths])]
    lines += [line(row) for row in rows]
    return "\n".join([*lines, *tail])


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


# -- redaction cost per turn ------------------------------------------------------------

def _closed_turns(session: ChatSession, budget: int) -> int:
    """Closed turns written into ``session`` until at most ``budget`` messages; returns how
    many were written. Turn kinds cycle: introduction with contact details, a question
    without personal data, a card payment, a lookup by tool call."""
    written, i = 0, 0
    while True:
        person = CAST[i % len(CAST)]
        kind = i % 4
        size = 4 if kind == 3 else 2
        if written + size > budget:
            return written
        if kind == 0:
            session.add_user(f"Hello, my name is {person.name}. Please update my contact "
                             f"details: e-mail {person.email}, phone {person.phone}. "
                             + FILLER)
            session.add_assistant(f"Thanks {person.first}, your e-mail is now {person.email} "
                                  f"and your phone {person.phone}. Anything else I can do?")
        elif kind == 1:
            session.add_user(f"What does the agreement say about ending the contract? "
                             f"Ticket {1000 + i}, order {52_000 + 7 * i}.")
            session.add_assistant(CLAUSE + " " + FILLER)
        elif kind == 2:
            session.add_user(f"Please charge the renewal to my card {person.card}, "
                             f"it expires in 2029.")
            session.add_assistant(f"Done: the renewal of {40 + i}.00 EUR was charged to the "
                                  f"card {person.card}. A receipt goes to {person.email}.")
        else:
            call = f"call_{i}"
            session.add_user(f"Can you find the account of {person.name}? I only have the "
                             f"e-mail, {person.email}.")
            session.add_assistant(tool_calls=[ToolCall(
                call, "lookup_customer", json.dumps({"email": person.email}))])
            session.add_tool_result(call, {"customer": person.name, "email": person.email,
                                           "phone": person.phone, "plan": "premium",
                                           "since": "2021-03-04", "open_tickets": i % 3})
            session.add_assistant(f"{person.name} is on the premium plan since 2021; the "
                                  f"phone on file is {person.phone}. " + FILLER)
        written += size
        i += 1


def _open_turn(session: ChatSession, calls: int) -> None:
    """The open last turn: a request answered by ``calls`` parallel tool calls, each with
    its result (non-ASCII JSON-escaped, as many APIs return it)."""
    person = CAST[0]
    session.add_user(f"Dear assistant, I'm {person.name}. Please send my last invoices to "
                     f"{person.email} and text me at {person.phone} when done.")
    ids = [f"open_{n}" for n in range(calls)]
    session.add_assistant("Looking them up now.", tool_calls=[
        ToolCall(ids[n], "invoice", json.dumps({"email": person.email, "index": n}))
        for n in range(calls)])
    for n, call in enumerate(ids):
        other = CAST[n % len(CAST)]
        session.add_tool_result(call, json.dumps({
            "invoice": f"INV-2025-{n:04d}", "billed_to": other.name, "email": other.email,
            "card": other.card, "amount": f"{120 + n}.00", "status": "paid"}))


def seed_turn_session(session: ChatSession, messages: int = TURN_MESSAGES) -> None:
    """``messages`` messages: closed turns, then an open turn with at least 2 calls."""
    closed = _closed_turns(session, messages - 4)
    _open_turn(session, messages - closed - 2)


def _timed(run: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return time.process_time() - cpu, time.perf_counter() - wall


@dataclass
class TurnResult:
    first: dict[str, tuple[float, float]]
    cpu: dict[str, list[float]]
    wall: dict[str, list[float]]
    messages: int
    tokens: int
    budget: int
    compressed: bool
    vault_values: int
    placeholders: int
    raw_left: int
    raw_checked: int

    def ratio(self, pick: Callable[[list[float]], float]) -> float:
        return pick(self.cpu["on"]) / pick(self.cpu["off"])


def _keep(url: str) -> Chatkeep:
    return Chatkeep(url, config={
        "privacy": {"anonymize_pii": True},
        "chat": {"max_history_tokens": 1_000_000, "summary_max_tokens": 1000},
        "memory": {"distil_on_compress": False}}, dispatcher="inline")


def run_turns(db_dir: Path, repeats: int, format: str) -> TurnResult:
    """Time ``build_history`` on a redacting and a non-redacting session of the same
    messages (see the module docstring)."""
    keep = _keep(f"sqlite:///{db_dir / 'bench-pii-turn.db'}")
    try:
        tenant = Ref("organization", 1)
        sessions = {"off": keep.sessions.create(tenant, Ref("user", 1), anonymize_pii=False),
                    "on": keep.sessions.create(tenant, Ref("user", 2))}
        assert not keep.privacy.redacts(sessions["off"]) and keep.privacy.redacts(sessions["on"])
        for session in sessions.values():
            seed_turn_session(session)
        # Warm the process (imports, connection pool, the recognizers' regex caches, phone
        # metadata of the cast's regions) on a session of its own with other values, so the
        # first calls below measure the sessions' own work.
        warm = keep.sessions.create(tenant, Ref("user", 3))
        warm.add_user("Hi, my name is Peter Brown, peter.brown@example.com, card 4000 0566 "
                      "5566 5556; phones +1 415 555 2671, +34 699 111 222, +33 6 98 76 54 32, "
                      "+49 30 123456, +44 20 7946 0123.")
        for _ in range(3):
            keep.compressor.build_history(warm, SYSTEM, format=format)  # type: ignore[call-overload]

        def build(name: str) -> Callable[[], object]:
            return lambda: keep.compressor.build_history(  # type: ignore[call-overload]
                sessions[name], SYSTEM, format=format)

        first = {name: _timed(build(name)) for name in ("off", "on")}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        wall: dict[str, list[float]] = {"off": [], "on": []}
        gc.collect()
        for i in range(repeats):
            for name in ("off", "on") if i % 2 == 0 else ("on", "off"):
                spent_cpu, spent_wall = _timed(build(name))
                cpu[name].append(spent_cpu)
                wall[name].append(spent_wall)
        history = build("on")()
        body = json.dumps(list(history), ensure_ascii=False)
        raw = [v for p in CAST for _, v in p.values()]
        vault = keep.privacy.vault(sessions["on"])
        return TurnResult(
            first, cpu, wall, len(history), history.info.tokens, history.info.budget,
            history.info.compressed, len(vault),
            sum(body.count(placeholder) for placeholder, _ in vault.items()),
            sum(1 for v in raw if v in body), len(raw))
    finally:
        keep.close()


def turn_table(result: TurnResult, repeats: int, format: str, markdown: bool) -> str:
    """The per-turn table, the target verdict and what was measured."""
    rows = []

    def row(label: str, off: float, on: float) -> None:
        rows.append([label, _ms(off), _ms(on), f"{on / off:.2f}x"])

    row(f"steady state, best of {repeats}, CPU ms", min(result.cpu["off"]),
        min(result.cpu["on"]))
    row(f"steady state, median of {repeats}, CPU ms", statistics.median(result.cpu["off"]),
        statistics.median(result.cpu["on"]))
    row(f"steady state, median of {repeats}, wall ms", statistics.median(result.wall["off"]),
        statistics.median(result.wall["on"]))
    row("first call (placeholders allocated, vault stored), CPU ms",
        result.first["off"][0], result.first["on"][0])
    row("first call, wall ms", result.first["off"][1], result.first["on"][1])
    ratio = result.ratio(statistics.median)
    verdict = "met" if ratio <= TARGET else "not met"
    notes = [
        f"target ≤ {TARGET:.1f}x: {verdict} (median CPU on/off {ratio:.2f}x, "
        f"best-of {result.ratio(min):.2f}x)",
        "",
        f"One build_history ({format}) of a session with {TURN_MESSAGES} messages after the "
        f"watermark on SQLite (temp file): {result.messages} messages out, "
        f"{result.tokens:,} tokens of a {result.budget:,} budget, folded: "
        f"{'yes' if result.compressed else 'no'}. Redacting session: {result.vault_values} "
        f"values in its vault, {result.placeholders} placeholders in the request, "
        f"{result.raw_left} of {result.raw_checked} seeded values left raw. Calls "
        "interleaved (order flipped each repetition); CPU is time.process_time. The first "
        "call is one sample: it also compiles the new values' patterns.",
    ]
    return render("Redaction cost per turn", ["measure", "redaction off", "redaction on",
                                              "on / off"], rows, notes, markdown)


def profile_turn(db_dir: Path, format: str, turns: int, top: int, markdown: bool) -> str:
    """cProfile of ``turns`` steady-state redacting calls: the ``top`` chatkeep functions by
    cumulative time, per call."""
    keep = _keep(f"sqlite:///{db_dir / 'bench-pii-profile.db'}")
    try:
        session = keep.sessions.create(Ref("organization", 1), Ref("user", 1))
        seed_turn_session(session)
        for _ in range(2):  # the first call stores the vault: profile the steady state
            keep.compressor.build_history(session, SYSTEM, format=format)  # type: ignore[call-overload]
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(turns):
            keep.compressor.build_history(session, SYSTEM, format=format)  # type: ignore[call-overload]
        profiler.disable()
    finally:
        keep.close()
    stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    marker = f"{os.sep}chatkeep{os.sep}"
    entries = [(key, value) for key, value in stats.items() if marker in key[0]]
    entries.sort(key=lambda item: -item[1][3])

    def rows(chosen: list[tuple[Any, Any]]) -> list[list[str]]:
        out = []
        for (path, line, function), (_, calls, own, cumulative, _) in chosen:
            where = path.split(marker, 1)[1]
            out.append([f"{function} ({where}:{line})", f"{cumulative * 1000 / turns:.2f}",
                        f"{own * 1000 / turns:.2f}", f"{calls / turns:,.0f}"])
        return out

    header = ["function", "cumulative ms", "own ms", "calls"]
    title = f"Profile of one redacting turn (cProfile, mean of {turns} steady-state calls)"
    by_own = sorted(entries, key=lambda item: -item[1][2])[:top]
    return "\n\n".join([
        render(f"{title}: top {top} chatkeep functions by cumulative time", header,
               rows(entries[:top]), [], markdown),
        render(f"{title}: top {top} chatkeep functions by own time", header, rows(by_own),
               ["Profiler overhead inflates the absolute figures; read the ranking."],
               markdown)])


# -- surface-form families --------------------------------------------------------------

def _plain(name: str) -> str:
    """``name`` without its accents."""
    return "".join(c for c in unicodedata.normalize("NFD", name)
                   if unicodedata.category(c) != "Mn")


_WIDE = str.maketrans({**{str(d): chr(0xFF10 + d) for d in range(10)}, "+": "\uff0b"})
ACCENTED = tuple(p for p in CAST if not p.name.isascii())
ASCII = tuple(p for p in CAST if p.name.isascii())


def _surname_first(name: str) -> str:
    *given, surname = name.split()
    return f"{surname}, {' '.join(given)}"


def _references(text: str) -> str:
    """Every character that is not an ASCII letter as an HTML numeric reference."""
    return "".join(c if c.isascii() and c.isalpha() else f"&#{ord(c)};" for c in text)


def _b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _jwt(person: Person, n: int) -> str:
    claims = json.dumps({"sub": person.email, "name": person.name, "n": n},
                        ensure_ascii=False)
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}))
    return f"{header}.{_b64url(claims)}.c2lnbmF0dXJlLXN0dWI"


def _scraper(email: str) -> str:
    local, domain = email.split("@")
    return f"{local} [at] {domain.replace('.', ' [dot] ')}"


def _spaced(text: str) -> str:
    return "  ".join(" ".join(word) for word in text.split())


_LOOK_ALIKES = str.maketrans({"A": "\u0391", "O": "\u039f", "a": "\u0430", "o": "\u043e",
                              "e": "\u0435"})


#: Family -> one record of the text, for the n-th record and a person.
SURFACE_FAMILIES: dict[str, tuple[tuple[Person, ...], Callable[[int, Person], str]]] = {
    "plain ASCII prose with values": (ASCII, lambda n, p: (
        f"Ticket {n}: {p.name} wrote from {p.email}, asked to be called on {p.phone} and "
        f"paid with the card {p.card}. ")),
    "JSON-escaped non-ASCII (\\uXXXX)": (ACCENTED, lambda n, p: json.dumps({
        "ticket": n, "customer": p.name, "contact": {"email": p.email, "phone": p.phone},
        "note": f"{p.name} confirmed the address"}) + "\n"),
    "percent-encoded": (CAST, lambda n, p: (
        f"GET /crm/search?name={quote(p.name)}&email={quote(p.email, safe='')}"
        f"&tel={quote(p.phone, safe='')}&page={n} HTTP/1.1 200\n")),
    "upper/lower case, accents stripped": (ACCENTED, lambda n, p: (
        f"Note {n}: {_plain(p.name).upper()} called again; later {_plain(p.name).lower()} "
        f"and {_plain(p.name)} confirmed the change. ")),
    "surname first": (CAST, lambda n, p: (
        f"Row {n}: {_surname_first(p.name)} ({p.email}); owner {_surname_first(p.name)} "
        f"signed. ")),
    "fullwidth digits": (CAST, lambda n, p: (
        f"Ref {n}: phone {p.phone.translate(_WIDE)}, card {p.card.translate(_WIDE)}, SSN "
        f"{EXTRA_VALUES[1][1].translate(_WIDE)} on file. ")),
    "HTML references and markup": (CAST, lambda n, p: (
        f"<tr><td>{n}</td><td>{_references(p.name)}</td><td>{_references(p.email)}</td>"
        f"<td><b>{p.first}</b> {' '.join(p.name.split()[1:])}</td></tr> ")),
    "base64url JWT payloads": (CAST, lambda n, p: (
        f"Request {n}: Authorization: Bearer {_jwt(p, n)} ")),
    "hex": (CAST, lambda n, p: (
        f"Frame {n}: 0x{p.email.encode().hex()} {p.name.encode().hex()} ")),
    "[at]/[dot], spaced letters": (CAST, lambda n, p: (
        f"Contact {n}: {_scraper(p.email)}, signed {_spaced(p.name)}. ")),
    "user names, look-alike letters": (CAST, lambda n, p: (
        f"User {n}: @{'_'.join(_plain(p.name).lower().split())} wrote as "
        f"{p.name.translate(_LOOK_ALIKES)}. ")),
}


def surface_text(make: Callable[[int, Person], str], people: Sequence[Person],
                 size: int = SURFACE_CHARS) -> str:
    """Records (each followed by a sentence of prose) until ``size`` characters."""
    parts: list[str] = []
    length, n = 0, 0
    while length < size:
        part = make(n, people[n % len(people)]) + FILLER + "\n"
        parts.append(part)
        length += len(part)
        n += 1
    return "".join(parts)


def surface_vault() -> PlaceholderVault:
    vault = PlaceholderVault()
    for person in CAST:
        for entity_type, value in person.values():
            vault.placeholder_for(entity_type, value)
    for entity_type, value in EXTRA_VALUES:
        vault.placeholder_for(entity_type, value)
    return vault


@dataclass
class FamilyResult:
    family: str
    chars: int
    redact: list[float]
    find_known: list[float]
    placeholders: int

    def per_kb(self, seconds: float) -> float:
        return seconds * 1000 * 1024 / self.chars


def run_surface(repeats: int) -> tuple[int, list[FamilyResult]]:
    """Per family: redaction and ``find_known`` CPU times of its ~10 KB text, each with a
    vault of the same known values (warmed by one call, so it holds what the detector
    adds)."""
    redactor = Redactor(PiiDetector())
    cases = {**{family: surface_text(make, people)
                for family, (people, make) in SURFACE_FAMILIES.items()},
             "reference: prose without values": surface_text(lambda n, p: "", CAST)}
    results = []
    values = len(surface_vault())
    for family, text in cases.items():
        vault = surface_vault()
        redacted = redactor.redact(text, vault)
        placeholders = sum(redacted.count(p) for p, _ in vault.items())
        redact, find = [], []
        gc.collect()
        for _ in range(repeats):
            # A fresh redactor and detector each time: their result caches would make every
            # repeat a look-up (the cost of a text seen for the first time is measured).
            redactor = Redactor(PiiDetector())
            redact.append(_timed(lambda t=text, v=vault, r=redactor: r.redact(t, v))[0])
            find.append(_timed(lambda t=text, v=vault: v.find_known(t))[0])
        results.append(FamilyResult(family, len(text), redact, find, placeholders))
    return values, results


def surface_table(values: int, results: list[FamilyResult], repeats: int,
                  markdown: bool) -> str:
    rows = [[r.family, f"{r.chars:,}", str(r.placeholders),
             f"{r.per_kb(min(r.redact)):.3f}", f"{r.per_kb(statistics.median(r.redact)):.3f}",
             f"{r.per_kb(statistics.median(r.find_known)):.3f}"] for r in results]
    families = [r for r in results if not r.family.startswith("reference")]
    worst = max(families, key=lambda r: r.per_kb(statistics.median(r.redact)))
    reference = next(r for r in results if r.family.startswith("reference"))
    notes = [
        f"Worst family: {worst.family}, {worst.per_kb(statistics.median(worst.redact)):.3f} "
        f"ms/KB (median redact; {worst.per_kb(statistics.median(worst.redact)) / reference.per_kb(statistics.median(reference.redact)):.1f}x "  # noqa: E501
        "prose without values).",
        "",
        f"Vault of {values} known values; each text redacted {repeats} times (CPU time, "
        "time.process_time). redact = Redactor.redact (recognizers + known values in every "
        "form); find_known = the vault's values alone (surface view + patterns). "
        "Placeholders: how many the redacted text holds.",
    ]
    return render("Surface-form families (~10 KB each)",
                  ["family", "chars", "placeholders", "redact best ms/KB",
                   "redact median ms/KB", "find_known median ms/KB"], rows, notes, markdown)


def turn_section(repeats: int, format: str, markdown: bool, db_dir: Path | None,
                 profile: bool) -> str:
    with tempfile.TemporaryDirectory(prefix="chatkeep-pii-") as tmp:
        directory = db_dir or Path(tmp)
        result = run_turns(directory, repeats, format)
        out = turn_table(result, repeats, format, markdown)
        if profile or result.ratio(statistics.median) > TARGET:
            out += "\n\n" + profile_turn(directory, format, 5, 10, markdown)
    return out


def surface_section(repeats: int, markdown: bool) -> str:
    values, results = run_surface(repeats)
    return surface_table(values, results, repeats, markdown)
