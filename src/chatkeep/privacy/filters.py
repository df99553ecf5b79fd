"""What the core asks of a privacy filter before any text leaves for a model.

``TextFilter`` is one text's outgoing form (the planner's view); ``OutboundFilter`` hands
out a session's egress and keeps stored summaries readable. ``PrivacyGuard`` is chatkeep's
outbound filter; a session that does not redact gets the open egress (``egress.OPEN``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from chatkeep.privacy.egress import Egress

if TYPE_CHECKING:
    from chatkeep.sessions import ChatSession


class TextFilter(Protocol):
    """Turns one outgoing text into what may leave for a model (redaction, or the identity).
    ``context`` is the message the text answers: "536221234" after "What's your SSN?"."""

    def __call__(self, text: str, context: str | None = None) -> str:
        """The outgoing form of ``text``."""
        ...


class OutboundFilter(Protocol):
    """Turns text into what may leave for a model on a session's behalf (PII redaction)."""

    def for_session(self, session: ChatSession,
                    known: Sequence[str | None] = ()) -> Egress:
        """The egress for ``session`` (the open one when the session does not redact);
        ``known`` are sealed value sets carried by recalled memories, redacted literally."""
        ...

    def restore_stored(self, session: ChatSession, text: str) -> str:
        """Undo the filter on text chatkeep stored in placeholder form (a summary) before
        filtering it again, so its placeholders are kept rather than escaped as user-typed
        ones."""
        ...

    def store_form(self, session: ChatSession, text: str) -> str:
        """How to store model-written text (a summary) so ``restore_stored`` reads it right."""
        ...
