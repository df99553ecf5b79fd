"""Re-seal every stored PII mapping with the newest encryption key.

Run after setting ``privacy.encryption_key`` for the first time (plain vaults become
sealed) or after putting a new key in front of the old ones (``"new,old"``: tokens
sealed with the old key are re-sealed with the new one, after which the old key can
be dropped). Session vaults are written by compare-and-set on their version and
memories' sealed values by compare-and-set on the old blob, so a re-key can run while
the application serves traffic; a row that changed meanwhile was written by the
application with the newest key already, and is skipped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from chatkeep.errors import PrivacyError
from chatkeep.privacy.vault import reseal
from chatkeep.store.memories import MemoryStore
from chatkeep.store.repository import Repository

PAGE = 200


@dataclass
class RekeyReport:
    """What a re-key did: rows re-sealed, already current, changed meanwhile."""

    vaults_resealed: int = 0
    vaults_current: int = 0
    memories_resealed: int = 0
    memories_current: int = 0
    raced: int = 0

    @property
    def done(self) -> int:
        """Rows looked at."""
        return (self.vaults_resealed + self.vaults_current + self.memories_resealed
                + self.memories_current + self.raced)


def total(repository: Repository, store: MemoryStore) -> int:
    """How many rows a re-key walks (for a progress bar)."""
    return repository.count_vaults() + store.lifecycle.count_sealed()


def rekey(repository: Repository, store: MemoryStore, key: str | None,
          step: Callable[[RekeyReport], None] | None = None) -> RekeyReport:
    """Re-seal every session vault and every memory's sealed values with the newest of
    ``key``'s keys; ``step`` is called after each row. A row no configured key opens
    raises ``PrivacyError`` naming it (nothing after it is touched, nothing before it is
    lost: each row is its own write)."""
    if not key:
        raise PrivacyError("privacy.encryption_key is not set: nothing to seal with")
    report = RekeyReport()

    def vaults() -> Iterator[tuple[str, str, Callable[[str], bool]]]:
        after = ""
        while page := repository.vaults_after(after, PAGE):
            for session_id, blob, version in page:
                after = session_id
                yield f"session {session_id}", blob, functools.partial(
                    repository.compare_and_set_vault, session_id, version)

    def sealed_memories() -> Iterator[tuple[str, str, Callable[[str], bool]]]:
        last = 0
        while page := store.lifecycle.sealed_after(last, PAGE):
            for memory_id, blob in page:
                last = memory_id
                yield f"memory {memory_id}", blob, functools.partial(
                    store.lifecycle.replace_sealed, memory_id, blob)

    for kind, rows in (("vaults", vaults()), ("memories", sealed_memories())):
        for what, blob, write in rows:
            fresh = _reseal(blob, key, what)
            if fresh is None:
                setattr(report, f"{kind}_current", getattr(report, f"{kind}_current") + 1)
            elif write(fresh):
                setattr(report, f"{kind}_resealed", getattr(report, f"{kind}_resealed") + 1)
            else:
                report.raced += 1
            if step:
                step(report)
    return report


def _reseal(blob: str, key: str, what: str) -> str | None:
    try:
        return reseal(blob, key)
    except PrivacyError as exc:
        raise PrivacyError(f"{what}: {exc}") from exc
