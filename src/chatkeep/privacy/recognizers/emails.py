"""E-mail addresses, including plus-addressing, sub-domains and accented (EAI/IDN) addresses."""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterator

from chatkeep.privacy.base import Span

__all__ = ["EmailRecognizer"]

# Letters of the Latin (with accents), Greek and Cyrillic scripts, and combining accents
# (a decomposed "é"). Other scripts stay out: Chinese or Japanese text is written without
# spaces, so allowing its letters would glue the words before an address onto it.
_INTL = "\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0300-\u036f\u0370-\u03ff\u0400-\u04ff"
_LOCAL_CHAR = rf"[A-Za-z0-9!#$%&'*+=?^_`{{|}}~\-{_INTL}]"
_LABEL_CHAR = rf"[A-Za-z0-9{_INTL}]"
# Every repetition is bounded or made of runs a "." separates, so a match attempt
# reads each character a bounded number of times.
_EMAIL = re.compile(
    r"(?<![\w.%+\-@/])"
    rf"(?P<local>{_LOCAL_CHAR}+(?:\.{_LOCAL_CHAR}+)*)"
    r"@"
    rf"(?P<domain>(?:{_LABEL_CHAR}(?:[A-Za-z0-9\-{_INTL}]{{0,61}}{_LABEL_CHAR})?\.)+"
    rf"(?:[A-Za-z{_INTL}]{{2,63}}|xn--[A-Za-z0-9\-]{{1,59}}))"
    r"(?![\w\-@]|\.[A-Za-z0-9])"
)
_LOCAL_ASCII = frozenset(string.ascii_letters + string.digits + "!#$%&'*+=?^_`{|}~-.")
_LOCAL_INTL = re.compile(f"[{_INTL}]")
_MAX_LOCAL = 64


def _local_char(char: str) -> bool:
    return char in _LOCAL_ASCII or _LOCAL_INTL.match(char) is not None


class EmailRecognizer:
    """Finds RFC 5322 "dot-atom" addresses whose domain has a letter-only TLD.

    Accented local parts and internationalised domains are accepted
    (``josé@ejemplo.es``, ``info@müller-bau.de``, RFC 6531 / IDNA) for the
    Latin, Greek and Cyrillic scripts. The TLD rule keeps ``pkg@1.2.3`` and
    ``user@localhost`` out, and a ``/`` before the name keeps the user of
    ``https://user@host/`` out; quoted local parts and IP-literal domains are
    too rare in chat to be worth the risk. The canonical form is NFC and
    case-folded so ``Ana@X.com`` and ``ana@x.com`` share a placeholder (mailbox
    case-sensitivity is theoretical in practice).
    """

    entity_types: tuple[str, ...] = ("EMAIL",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every e-mail address in ``text``."""
        # Scanning from each "@" is several times faster than a regex over the whole text;
        # each "@" reads at most 64 characters back and up to the next "@" forward.
        at = text.find("@")
        resume = 0
        while at != -1:
            start = at
            while start > resume and at - start <= _MAX_LOCAL and _local_char(text[start - 1]):
                start -= 1
            match = _EMAIL.match(text, start) if start < at else None
            while match is None and start < at - 1 and text[start] in ".":
                start += 1
                match = _EMAIL.match(text, start)
            if match is not None and len(match.group("local")) <= _MAX_LOCAL:
                value = match.group()
                canonical = unicodedata.normalize("NFC", value).casefold()
                yield Span(match.start(), match.end(), "EMAIL", value, canonical=canonical)
                resume = match.end()
            at = text.find("@", max(at + 1, resume))
