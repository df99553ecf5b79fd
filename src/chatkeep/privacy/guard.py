"""``PrivacyGuard``: the two switches, and the per-session placeholder mapping in the database.

Redaction happens exactly when the application switch (``privacy.anonymize_pii``,
off by default) and the session's own (``session.anonymize_pii``, on by default)
are both on. The guard is the ``OutboundFilter`` the compressor and the distiller
run every outgoing text through, and it restores real values into model output.

The mapping lives in ``chat_sessions.pii_vault`` (Fernet-encrypted when
``privacy.encryption_key`` is set) and grows by compare-and-set, so two
processes redacting the same session never give one placeholder two values:
a writer that loses the race re-reads the mapping and redacts again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from chatkeep.config import PrivacyConfig
from chatkeep.errors import PrivacyError
from chatkeep.privacy.detector import PiiDetector, Recognizer, default_recognizers
from chatkeep.privacy.escaping import PLACEHOLDER_TOKEN_RE, escape
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault, seal, unseal
from chatkeep.sessions import ChatSession
from chatkeep.store.repository import Repository

MAX_VAULT_ATTEMPTS = 8


def _identity(text: str, context: str | None = None) -> str:
    return text


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
        """Both switches on: the application's and this conversation's."""
        return self.config.anonymize_pii and session.anonymize_pii

    def for_session(self, session: ChatSession,
                    known: Sequence[str | None] = ()) -> _TextFilter:
        """The text filter for everything that leaves for a model on ``session``'s behalf.

        ``known`` are sealed value sets carried by recalled memories
        (``Memory.sealed_pii``): their values join the session's vault, under this
        session's own placeholders, so they are redacted literally wherever they appear.
        """
        if not self.redacts(session):
            return _identity
        return _SessionRedaction(self, session, known)

    def vault(self, session: ChatSession) -> PlaceholderVault:
        """The session's placeholder mapping as stored."""
        return self._load(session.id)[0]

    def restore(self, session: ChatSession, text: str) -> str:
        """Put real values back into model output (exact placeholders only; a mangled one
        stays as it is). Only while the session redacts: with redaction off the model saw
        real text, so placeholder-shaped text in its output is literal (a user may have
        typed ``<EMAIL_1>``) and must never turn into a value, whatever the vault holds."""
        if not self.redacts(session):
            return text
        return self.restore_stored(session, text)

    def restore_stored(self, session: ChatSession, text: str) -> str:
        """Restore text chatkeep stored in placeholder form (a summary, see ``store_form``):
        its real placeholders map to values, escaped look-alikes become literal text."""
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
        carried = PlaceholderVault()
        for span in [*self.redactor.detector.detect(text), *vault.find_known(text)]:
            carried.placeholder_for(span.entity_type, span.text, span.canonical)
        if not len(carried):
            return None
        return seal(carried, self.config.encryption_key)

    def _load(self, session_id: str) -> tuple[PlaceholderVault, int]:
        blob, version = self.repository.read_vault(session_id)
        if blob is None:
            return PlaceholderVault(), version
        return unseal(blob, self.config.encryption_key), version


class _TextFilter(Protocol):
    def __call__(self, text: str, context: str | None = None) -> str: ...


class _SessionRedaction:
    """Redacts texts of one session, persisting new placeholders before returning text
    that uses them (so every placeholder a model sees is already in the database)."""

    def __init__(self, guard: PrivacyGuard, session: ChatSession,
                 known: Sequence[str | None] = ()) -> None:
        self.guard = guard
        self.session_id = session.id
        self.known = [unseal(blob, guard.config.encryption_key) for blob in known if blob]
        # Start from the row the caller holds (build_history has just re-read it); if it is
        # stale, the first compare-and-set fails and the mapping is re-read.
        row = session.row
        vault = (unseal(row.pii_vault, guard.config.encryption_key) if row.pii_vault
                 else PlaceholderVault())
        self._adopt(vault, row.pii_vault_version)

    def _adopt(self, vault: PlaceholderVault, version: int) -> None:
        """Take a stored vault; the size as stored decides whether a write is owed."""
        self.vault, self.version, self.stored = vault, version, len(vault)
        for carried in self.known:  # recalled memories' values, this session's placeholders
            for entity_type, canonical, value in carried.entries():
                self.vault.placeholder_for(entity_type, value, canonical)

    def __call__(self, text: str, context: str | None = None) -> str:
        for _ in range(MAX_VAULT_ATTEMPTS):
            redacted = self.guard.redactor.redact(text, self.vault, context)
            if len(self.vault) == self.stored:
                return redacted
            blob = seal(self.vault, self.guard.config.encryption_key)
            if self.guard.repository.compare_and_set_vault(self.session_id, self.version, blob):
                self.version += 1
                self.stored = len(self.vault)
                return redacted
            self._adopt(*self.guard._load(self.session_id))
        raise PrivacyError(
            f"session {self.session_id}: could not store the placeholder mapping "
            f"after {MAX_VAULT_ATTEMPTS} attempts"
        )
