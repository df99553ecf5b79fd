"""Context checks shared by recognizers that look at the text around a candidate."""

from __future__ import annotations

import re

__all__ = ["continues_iban"]

# "GB31 NCJL " or "DE89 3704 0044 ": a country code, check digits, then 4-char groups.
# The lookbehind sits after the first letter so the regex engine can skip to capitals.
_IBAN_HEAD = re.compile(r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d{2}(?: [A-Z0-9]{4}){0,7} $")


def continues_iban(text: str, start: int) -> bool:
    """True when the number at ``start`` continues an IBAN-shaped group sequence.

    Such digits belong to that IBAN (valid or not), never to a card or phone
    number that happens to hide inside a mistyped one.
    """
    # The head ends with a space, maybe then the newline "$" may stand before.
    if text[start - 1 : start] != " " and text[max(0, start - 2) : start] != " \n":
        return False
    return _IBAN_HEAD.search(text, max(0, start - 45), start) is not None
