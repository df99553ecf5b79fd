"""``pii_mask``: what the embedding model may see of a text (personal values masked).

The one mask every embedding request goes through (``EmbedMask`` is its shape).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from chatkeep.privacy.detector import resolve_overlaps
from chatkeep.privacy.vault import unseal

if TYPE_CHECKING:
    from chatkeep.privacy.guard import PrivacyGuard
    from chatkeep.sessions import ChatSession


class EmbedMask(Protocol):
    """What leaves for the embedding model: ``text`` with personal values masked.

    ``sealed``: the values a memory carries (``Memory.sealed_pii``), found literally;
    ``session``: the conversation the text belongs to (its vault's values are masked too);
    ``context``: the message ``text`` answers ("What's your SSN?" makes a bare number one).
    """

    def __call__(self, text: str, sealed: str | None = None, *,
                 session: ChatSession | None = None, context: str | None = None) -> str:
        """The form of ``text`` an embedding endpoint may see."""
        ...


def pii_mask(guard: PrivacyGuard) -> EmbedMask:
    """What the embedding model may see when ``privacy.anonymize_pii`` is on, or the text
    belongs to a session or memory made under it (a worker's own switch never lowers the
    protection a session was created with): each personal
    value replaced by its type (``<EMAIL>``), the same in every session so vectors stay
    comparable. Values are what the recognizers detect (with the question ``text`` answers
    as context), those a memory carries sealed (``sealed_pii``) and those the session's
    vault holds, both found literally. The one mask every embedding request goes through:
    recall queries, memories at distil time, their retries and the ``memories embed``
    backfill."""
    def mask(text: str, sealed: str | None = None, *, session: ChatSession | None = None,
             context: str | None = None) -> str:
        if not (guard.config.anonymize_pii or sealed
                or (session is not None and guard.redacts(session))):
            return text  # nothing asks for protection: the user's choice
        spans = list(guard.redactor.detector.detect(text, context))
        if sealed:
            spans += unseal(sealed, guard.config.encryption_key).find_known(text)
        if session is not None:
            spans += guard.vault(session).find_known(text)
        out, position = [], 0
        for span in resolve_overlaps(spans):
            out += [text[position:span.start], f"<{span.entity_type}>"]
            position = span.end
        return "".join([*out, text[position:]])
    return mask
