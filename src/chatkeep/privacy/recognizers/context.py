"""Context checks shared by recognizers that look at the text around a candidate."""

from __future__ import annotations

import re

__all__ = ["continues_iban"]

# "GB31 NCJL " or "DE89 3704 0044 ": a country code, check digits, then 4-char groups.
_IBAN_HEAD = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: [A-Z0-9]{4}){0,7} $")


def continues_iban(text: str, start: int) -> bool:
    """True when the number at ``start`` continues an IBAN-shaped group sequence.

    Such digits belong to that IBAN (valid or not), never to a card or phone
    number that happens to hide inside a mistyped one.
    """
    return start > 0 and _IBAN_HEAD.search(text, max(0, start - 45), start) is not None
