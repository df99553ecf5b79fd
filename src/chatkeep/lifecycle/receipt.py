"""The erasure receipt: proof with no personal content, like a package lock file.

A receipt holds the tenant, the scope (its ids), when it ran, the counts per surface, the
ids of what went (never text), what was left and why, and a SHA-256 digest over its
canonical JSON (sorted keys, no floats, no insignificant whitespace). It is checked by
recomputing from the store (:func:`check_receipt`), never by trusting the file alone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from chatkeep.errors import InvalidArgument

RECEIPT_VERSION = 1
NOT_ERASABLE_HERE = (
    "backups and database snapshots taken before the erasure: restore none without "
    "erasing again",
    "copies sent to model and embedding providers (prompts, completions, embeddings) "
    "under their own retention",
    "PostgreSQL: dead row versions until VACUUM, and WAL archives or replicas' copies "
    "under their own retention (chatkeep db vacuum)",
)
"""What the erasure cannot reach from here: every receipt lists it."""


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: sorted keys, compact, UTF-8 text; floats refused (two
    writers could print one differently)."""
    _no_floats(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _no_floats(value: Any) -> None:
    if isinstance(value, float):
        raise InvalidArgument("a receipt holds no floats")
    if isinstance(value, dict):
        for item in value.values():
            _no_floats(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _no_floats(item)


def digest_of(body: dict[str, Any]) -> str:
    """SHA-256 (hex) of ``body``'s canonical JSON."""
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class ErasureReceipt:
    """What an erasure removed, as ids and counts, with its digest."""

    erasure_id: str
    tenant: str
    scope: dict[str, str | None]
    started_at: str
    finished_at: str
    counts: dict[str, int]
    session_ids: list[str]
    memory_ids: list[str]
    kept: list[dict[str, str]]
    not_erasable: list[str] = field(default_factory=lambda: list(NOT_ERASABLE_HERE))
    version: int = RECEIPT_VERSION
    digest: str = ""

    def body(self) -> dict[str, Any]:
        """Everything but the digest: what the digest is computed over."""
        return {"version": self.version, "erasure_id": self.erasure_id,
                "tenant": self.tenant, "scope": dict(self.scope),
                "started_at": self.started_at, "finished_at": self.finished_at,
                "counts": dict(self.counts), "session_ids": list(self.session_ids),
                "memory_ids": list(self.memory_ids), "kept": [dict(k) for k in self.kept],
                "not_erasable": list(self.not_erasable)}

    def computed_digest(self) -> str:
        """The digest its contents give (equal to ``digest`` unless it was changed)."""
        return digest_of(self.body())

    def sealed(self) -> ErasureReceipt:
        """This receipt with its digest set."""
        return ErasureReceipt(**{**self._fields(), "digest": self.computed_digest()})

    def _fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @property
    def total(self) -> int:
        """Everything removed, summed over the surfaces (0: there was nothing)."""
        return sum(v for k, v in self.counts.items() if not k.endswith("_unlinked"))

    def to_dict(self) -> dict[str, Any]:
        """The receipt as JSON-ready values, digest included."""
        return {**self.body(), "digest": self.digest}

    def to_json(self) -> str:
        """The receipt as canonical JSON (what ``chatkeep erase`` writes)."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> ErasureReceipt:
        """A receipt read back (``InvalidArgument`` when it is not one)."""
        if not isinstance(data, dict):
            raise InvalidArgument("a receipt is a JSON object")
        try:
            return cls(erasure_id=str(data["erasure_id"]), tenant=str(data["tenant"]),
                       scope=dict(data["scope"]), started_at=str(data["started_at"]),
                       finished_at=str(data["finished_at"]),
                       counts={str(k): v for k, v in dict(data["counts"]).items()},
                       session_ids=list(data["session_ids"]),
                       memory_ids=list(data["memory_ids"]),
                       kept=[dict(k) for k in data["kept"]],
                       not_erasable=list(data["not_erasable"]),
                       version=data["version"], digest=str(data["digest"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"not an erasure receipt: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> ErasureReceipt:
        """:meth:`from_dict` over JSON text."""
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"not an erasure receipt: {exc}") from None


@dataclass(frozen=True, slots=True)
class ErasureCheck:
    """``verify_erasure``'s answer: ``ok`` and, when not, every problem found. Truthy
    when it verified."""

    ok: bool
    problems: list[str]

    def __bool__(self) -> bool:
        return self.ok


def check_receipt(receipt: ErasureReceipt, recorded: dict[str, Any] | None,
                  still_stored: list[str], left_in_scope: dict[str, int]) -> ErasureCheck:
    """Compare a receipt with what the store says (pure): ``recorded`` is the store's own
    record of that erasure (``digest``, ``counts``, ``session_ids``, ``memory_ids``;
    ``None``: it has none), ``still_stored`` the receipt's ids the store still holds,
    ``left_in_scope`` what the scope still holds per surface."""
    problems = []
    if receipt.computed_digest() != receipt.digest:
        problems.append("the digest does not match the receipt's contents: it was changed")
    if recorded is None:
        problems.append(f"this store has no record of erasure {receipt.erasure_id}")
    else:
        if recorded["digest"] != receipt.digest:
            problems.append("the store recorded another digest for this erasure")
        for key in ("counts", "session_ids", "memory_ids"):
            if recorded[key] != getattr(receipt, key):
                problems.append(f"the receipt's {key} differ from the store's record")
    problems += [f"still stored: {item}" for item in still_stored]
    problems += [f"left in the scope: {n} {surface}"
                 for surface, n in sorted(left_in_scope.items()) if n]
    return ErasureCheck(not problems, problems)
