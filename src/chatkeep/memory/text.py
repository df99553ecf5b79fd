"""Text helpers: the normalised form behind the cheap duplicate check, and query terms.

Two facts that differ only in case, spacing, punctuation or Unicode form are the
same fact; that is caught here without asking a model.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_WORD = re.compile(r"\w+")
MAX_QUERY_TERMS = 32

# Small on purpose: words so common they would make every memory "match".
_STOPWORD_TEXT = """
a an and are as at be been but by can could did do does for from had has have he her
him his how i if in into is it its me my no not of on or our she so than that the their
them then there these they this to up us was we were what when where which who why will
with would you your
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def normalise(text: str) -> str:
    """Case-folded words of ``text`` joined by single spaces (NFKC, no punctuation)."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def content_key(text: str) -> str:
    """A fixed-length key of the normalised text (the unique index column)."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()


def query_terms(text: str | None) -> list[str]:
    """Distinct, meaningful words of a query, in order (at most ``MAX_QUERY_TERMS``)."""
    terms: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text or "").casefold()):
        if word not in STOPWORDS and word not in terms and word.strip("_"):
            terms.append(word)
    return terms[:MAX_QUERY_TERMS]
