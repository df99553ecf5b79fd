"""Context checks shared by recognizers that look at the text around a candidate.

Two kinds of context: the characters right before a candidate in the same text
(an IBAN it continues), and the previous message of the conversation, which
says what a bare reply is (:func:`asked_for`: "What's your SSN?" makes the
reply ``536221234`` an SSN, "What's your order number?" makes ``612345678`` not a
phone number).
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["SHORT_REPLY", "Topic", "asked_for", "continues_iban", "is_short_reply"]

#: What a question asks for, as far as the built-in recognizers care.
Topic = Literal["phone", "ssn", "other"]

#: A reply longer than this (characters) is a message of its own, not an answer
#: whose meaning comes from the previous message.
SHORT_REPLY = 80

# "GB31 NCJL " or "DE89 3704 0044 ": a country code, check digits, then 4-char groups
# (separated by one or two spaces or no-break spaces, as people paste them).
# The lookbehind sits after the first letter so the regex engine can skip to capitals.
_IBAN_HEAD = re.compile(
    r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d{2}(?:[ \u00a0]{1,2}[A-Z0-9]{4}){0,7}[ \u00a0]{1,2}$"
)
_IBAN_HEAD_WINDOW = 60

# The end of the previous message, where the question is: its last 160 characters.
_QUESTION_WINDOW = 160
# Words that say what is asked for. The last one in the question wins
# ("your order number and a phone to call" asks for a phone).
_TOPIC_WORDS = re.compile(
    r"(?i)(?<![^\W\d_])(?:"
    r"(?P<ssn>ssn|social\s+security|ss\#)"
    r"|(?P<phone>(?:tele|cell|mobile\s|home\s|work\s)?phone|tel|mobile|cell|whats\s?app|landline"
    r"|contact\s+(?:number|no)|(?:call|reach|ring|text)\s+you|number\s+to\s+(?:call|reach|ring)"
    r"|tel[ée]fono|m[óo]vil|celular|fijo|t[ée]l[ée]phone|t[ée]l|portable|joindre|joignable"
    r"|telefon(?:nummer)?|handy(?:nummer)?|mobilnummer|rufnummer|erreichen|erreichbar|anrufen)"
    r"|(?P<other>order|invoice|ticket|case|reference|ref|tracking|account|booking|confirmation"
    r"|reservation|policy|claim|member(?:ship)?|customer|zip|postcode|postal|pin|passcode|code"
    r"|pedido|factura|referencia|expediente|reserva|cliente|c[óo]digo"
    r"|commande|facture|dossier|r[ée]servation|suivi|client|colis"
    r"|bestell\w*|rechnung\w*|kunden\w*|auftrag\w*|buchung\w*|sendung\w*|vorgang\w*)"
    r")(?![^\W\d_])"
)


def continues_iban(text: str, start: int) -> bool:
    """True when the number at ``start`` continues an IBAN-shaped group sequence.

    Such digits belong to that IBAN (valid or not), never to a card or phone
    number that happens to hide inside a mistyped one.
    """
    # The head ends with a space (or no-break space), maybe then a newline.
    if text[start - 1 : start] not in (" ", "\u00a0") and text[max(0, start - 2) : start] != " \n":
        return False
    return _IBAN_HEAD.search(text, max(0, start - _IBAN_HEAD_WINDOW), start) is not None


def asked_for(previous: str | None) -> Topic | None:
    """What the end of ``previous`` (the message being answered) asks for, if it is clear.

    ``"phone"`` for a phone number ("What's the best number to reach you on?",
    "¿Cuál es su teléfono?"), ``"ssn"`` for a US Social Security number,
    ``"other"`` for an order, invoice, ticket, case... number; ``None`` when no
    such word ends the message.
    """
    if not previous:
        return None
    topic: Topic | None = None
    for match in _TOPIC_WORDS.finditer(previous, max(0, len(previous) - _QUESTION_WINDOW)):
        topic = "ssn" if match["ssn"] else "phone" if match["phone"] else "other"
    return topic


def is_short_reply(text: str) -> bool:
    """True when ``text`` is short enough to be read as an answer to the previous message."""
    return len(text.strip()) <= SHORT_REPLY
