"""``PrivacyGuard``: the two switches, and the per-session placeholder mapping in the database.

Redaction happens when the session's own switch (``session.anonymize_pii``, on by
default) is on and either the application switch (``privacy.anonymize_pii``, off by
default) is on or the session records that it was created (or redacted) under it
(``pii_protected``): a process started with the default config never sends a session's
text with less protection than it was created under.

The guard hands out each session's egress (:mod:`chatkeep.privacy.egress`), which the
compressor, the distiller and the framework integrations send everything through, and
it restores real values into model output.

The mapping lives in ``chat_sessions.pii_vault`` (Fernet-encrypted when
``privacy.encryption_key`` is set) and grows by compare-and-set, so two
processes redacting the same session never give one placeholder two values:
a writer that loses the race re-reads the mapping and plans again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from chatkeep import switches
from chatkeep.config import PrivacyConfig
from chatkeep.errors import InvalidArgument, PrivacyError
from chatkeep.privacy.base import Span
from chatkeep.privacy.detector import PiiDetector, Recognizer, default_recognizers
from chatkeep.privacy.egress import OPEN, Egress, SessionEgress, map_strings
from chatkeep.privacy.escaping import PLACEHOLDER_TOKEN_RE, escape
from chatkeep.privacy.known_values import reads_as_written
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.streaming import StreamRestorer
from chatkeep.privacy.vault import PlaceholderVault, seal, unseal
from chatkeep.sessions import ChatSession
from chatkeep.store.repository import Repository

T = TypeVar("T")
#: Times a framework's request is scrubbed again after losing the vault's compare-and-set.
MAX_VAULT_ATTEMPTS = 8


class PrivacyGuard:
    """Decides whether a session redacts, redacts its outgoing text, restores model output."""

    def __init__(
        self,
        config: PrivacyConfig,
        repository: Repository,
        extra_recognizers: list[Recognizer] | None = None,
    ) -> None:
        self.config = config
        self.repository = repository
        recognizers: list[Recognizer] = default_recognizers(config.phone_regions)
        if config.ner:
            from chatkeep.privacy.ner import PresidioRecognizer

            recognizers.append(PresidioRecognizer())
        recognizers.extend(extra_recognizers or [])
        self.redactor = Redactor(PiiDetector(recognizers))

    def redacts(self, session: ChatSession) -> bool:
        """Both switches on: the application's and this conversation's. The application's
        counts as on for a session created under it or already redacted (its row is
        ``pii_protected``), so a process started without it (a sweep, a worker on default
        config) never sends that session's text with less protection."""
        _check_session(session)
        return switches.redacts(session.anonymize_pii, self.config.anonymize_pii,
                                session.row.pii_protected)

    def for_session(self, session: ChatSession,
                    known: Sequence[str | None] = ()) -> Egress:
        """The egress for everything that leaves for a model on ``session``'s behalf
        (:mod:`chatkeep.privacy.egress`): the open egress when the session does not redact.

        ``known`` are sealed value sets carried by recalled memories
        (``Memory.sealed_pii``): their values join the session's vault, under this
        session's own placeholders, so they are redacted literally wherever they appear.
        The egress starts from the row the caller holds (``build_history`` has just
        re-read it); if that is stale, its first ``flush`` fails and it reloads.
        """
        if not self.redacts(session):
            return OPEN
        key = self.config.encryption_key
        blob, version = _version_of(session)
        session_id = session.id

        def store(expected: int, vault: PlaceholderVault) -> bool:
            return self.repository.compare_and_set_vault(session_id, expected, seal(vault, key))

        return SessionEgress(
            self.redactor, unseal(blob, key) if blob else PlaceholderVault(), version,
            store=store, load=lambda: self._load(session_id),
            carried=[unseal(sealed, key) for sealed in known if sealed])

    def scrub(self, session: ChatSession, payload: T, context: str | None = None) -> T:
        """A whole request body a framework is about to send on ``session``'s behalf
        (``call_model_input_filter`` and the like), with no raw value left and its
        placeholders stored before it is returned. ``context``: the conversation message
        the body's new input answers (see :meth:`Egress.scrub`). Fails closed with
        ``PrivacyError`` when the mapping cannot be stored."""
        egress = self.for_session(session)
        for _ in range(MAX_VAULT_ATTEMPTS):
            body = egress.scrub(payload, context)
            if egress.flush():
                return body
        raise PrivacyError(f"session {session.id}: could not store the placeholder mapping "
                           f"after {MAX_VAULT_ATTEMPTS} attempts; nothing was sent")

    def restore_payload(self, session: ChatSession, payload: T) -> T:
        """``restore`` over every string of a JSON-like value (a framework's model output,
        written in placeholders, stored with its real values)."""
        if not self.redacts(session):
            return payload
        vault = self.vault(session)
        restored: T = map_strings(payload, lambda text: self.redactor.restore(text, vault))
        return restored

    def vault(self, session: ChatSession) -> PlaceholderVault:
        """The session's placeholder mapping as stored."""
        _check_session(session)
        return self._load(session.id)[0]

    def restore(self, session: ChatSession, text: str) -> str:
        """Put real values back into model output (exact placeholders only; a mangled one
        stays as it is). Only while the session redacts: with redaction off the model saw
        real text, so placeholder-shaped text in its output is literal (a user may have
        typed ``<EMAIL_1>``) and must never turn into a value, whatever the vault holds."""
        if not self.redacts(session):
            return text
        return self.restore_stored(session, text)

    def restorer(self, session: ChatSession) -> StreamRestorer:
        """A restorer for one streamed model response of ``session`` (``feed`` each
        chunk, ``flush`` at the end): a placeholder split across chunks comes back whole.
        The mapping is read here, once: every placeholder a response can name was stored
        before its request left, so feeding does no I/O (and the async twin's restorer is
        safe on the event loop). Take a new one for each response of a run."""
        if not self.redacts(session):
            return StreamRestorer(lambda text: text)
        vault = self.vault(session)
        return StreamRestorer(lambda text: self.redactor.restore(text, vault))

    def restore_stored(self, session: ChatSession, text: str) -> str:
        """Restore text chatkeep stored in placeholder form (a summary, see ``store_form``):
        its real placeholders map to values, escaped look-alikes become literal text."""
        _check_session(session)
        if not PLACEHOLDER_TOKEN_RE.search(text):
            return text  # nothing placeholder-shaped: no need to read the mapping
        return self.redactor.restore(text, self.vault(session))

    def store_form(self, session: ChatSession, text: str) -> str:
        """How to store model-written text (a summary) so ``restore_stored`` reads it right:
        written while redacting, its placeholders are real; written while not, any
        placeholder-shaped text in it is literal, so it is escaped."""
        return text if self.redacts(session) else escape(text)

    def sealed_values(self, session: ChatSession, text: str) -> str | None:
        """The personal values ``text`` holds, sealed like a vault, or ``None`` (what a
        memory distilled from ``session`` carries): values of the session's vault found
        literally, and whatever the recognizers detect."""
        vault = self.vault(session)
        return seal_spans([*self.redactor.detector.detect(text), *vault.find_known(text)],
                          self.config.encryption_key)

    def _load(self, session_id: str) -> tuple[PlaceholderVault, int]:
        blob, version = self.repository.read_vault(session_id)
        if blob is None:
            return PlaceholderVault(), version
        return unseal(blob, self.config.encryption_key), version


def _check_session(session: object) -> None:
    """``InvalidArgument`` unless ``session`` is a session (``None`` would otherwise fail
    deep inside with an ``AttributeError``)."""
    if not isinstance(session, ChatSession):
        raise InvalidArgument(f"expected a ChatSession, got {type(session).__name__}")


def _version_of(session: ChatSession) -> tuple[str | None, int]:
    row = session.row
    return row.pii_vault, row.pii_vault_version


def seal_spans(spans: Sequence[Span], key: str | None) -> str | None:
    """The values of ``spans``, sealed like a vault with ``key`` (``None``: no span): what a
    memory carries."""
    carried = PlaceholderVault()
    for span in spans:
        carried.placeholder_for(span.entity_type, _carried_value(span), span.canonical)
    return seal(carried, key) if len(carried) else None


def _carried_value(span: Span) -> str:
    """The value a memory carries for ``span``: the text it was found as, unless that text
    is a form the value's patterns do not read back (a base64 or hex run holding it: its
    patterns would match that run only), then the value's canonical form."""
    if span.canonical is None or reads_as_written(span.entity_type, span.canonical, span.text):
        return span.text
    return span.canonical
