"""The erasure plan: what an erasure will remove, decided from the store's inventory
with no I/O (Terraform's ``plan``; ``git clean -n``).

From the scope's sessions and the facts of every memory it may own, the plan says which
memories go (an actor's personal ones; a subject's; any distilled from the scope's
conversations that carries personal values; everything of a tenant), which stay and why
(a memory distilled from their conversation with none of their values: its link to the
conversation is cut), the counts per surface, and the holds in the way. It prints for
``--dry-run``; :mod:`chatkeep.lifecycle.erase` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chatkeep.store.lifecycle import (
    EraseScope,
    HoldRow,
    Inventory,
    MemoryFact,
    Parties,
    holds_in_the_way,
)

KEPT_WHY = ("a {kind} memory distilled from their conversation that carries none of their "
            "personal values: kept, its link to the conversation cut")


@dataclass(frozen=True, slots=True)
class ErasurePlan:
    """What erasing ``scope`` removes: sessions, message count, memories to erase and to
    keep (with why), expected counts per surface, the holds that refuse it."""

    scope: EraseScope
    sessions: list[Parties]
    messages: int
    erase_memories: list[int]
    keep_memories: list[tuple[int, str]]
    vectors: int
    usage_rows: int
    holds: list[HoldRow] = field(default_factory=list)

    @property
    def session_ids(self) -> list[str]:
        """The ids of the sessions that go."""
        return [s[0] for s in self.sessions]

    @property
    def blocked(self) -> bool:
        """A hold is in the way: applying it would be refused."""
        return bool(self.holds)

    @property
    def empty(self) -> bool:
        """Nothing of the scope is stored (a second erasure plans this)."""
        return not (self.sessions or self.erase_memories or self.keep_memories)

    def counts(self) -> dict[str, int]:
        """What the apply will count, per surface (before anything else arrives)."""
        return {"sessions": len(self.sessions), "messages": self.messages,
                "memories": len(self.erase_memories), "vectors": self.vectors,
                "usage_unlinked": self.usage_rows,
                "memories_unlinked": len(self.keep_memories)}

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready values (ids and counts, no content)."""
        kind, ref = self.scope.kind, self.scope.ref
        return {"tenant": str(self.scope.tenant), "scope": kind,
                "ref": str(ref) if ref is not None else None,
                "counts": self.counts(), "session_ids": self.session_ids,
                "erase_memory_ids": self.erase_memories,
                "keep_memories": [{"id": i, "why": why} for i, why in self.keep_memories],
                "holds": [{"id": h.id, "on": h.describe(), "reason": h.reason}
                          for h in self.holds]}

    def describe(self) -> list[str]:
        """The plan as lines for people (``chatkeep erase --dry-run``)."""
        lines = [f"erase {self.scope.describe()}"]
        lines += [f"  {name}: {count}" for name, count in self.counts().items()]
        lines += [f"  keep memory {i}: {why}" for i, why in self.keep_memories]
        lines += [f"  REFUSED by {h.describe()}: {h.reason}" for h in self.holds]
        return lines


def memory_fate(scope: EraseScope, fact: MemoryFact) -> str | None:
    """``"erase"``, ``"keep"`` (distilled from the scope, none of its values) or ``None``
    (not the scope's)."""
    if scope.kind == "tenant" or fact.personal_of_scope:
        return "erase"
    if fact.from_scope_session:
        return "erase" if fact.carries_values else "keep"
    return None


def plan_erasure(inventory: Inventory) -> ErasurePlan:
    """The plan for ``inventory``'s scope (pure: the same inventory, the same plan)."""
    scope = inventory.scope
    erase: list[int] = []
    keep: list[tuple[int, str]] = []
    for fact in inventory.memories:
        fate = memory_fate(scope, fact)
        if fate == "erase":
            erase.append(fact.id)
        elif fate == "keep":
            keep.append((fact.id, KEPT_WHY.format(kind=fact.scope)))
    vectors = sum(1 for i in erase if i in inventory.vector_ids)
    return ErasurePlan(
        scope, list(inventory.sessions), sum(inventory.message_counts.values()), erase,
        keep, vectors, inventory.usage_rows,
        holds_in_the_way(scope, inventory.holds, inventory.sessions))
