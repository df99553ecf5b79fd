"""Who a memory applies to: the scope rules, in one place.

A memory always belongs to one tenant and never leaves it. Within the tenant it is
``tenant``-wide, about a ``subject`` (a matter, a ticket ...), or ``personal`` to
an actor. A session reads the tenant's memories, its subject's, and (only when it
has an actor) that actor's personal ones.

Rules for facts the model proposes:

* ``personal`` from a session with no actor is dropped: there is nobody to scope it to.
* ``subject`` from a session with no subject is dropped, never widened to the tenant:
  subject facts are often confidential to the matter (an ethical wall), and widening a
  scope is the one direction that can leak. The extraction prompt already tells the
  model the scope is unavailable, so this only catches a model that ignored it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from chatkeep.errors import InvalidArgument
from chatkeep.refs import Ref


class Scope(StrEnum):
    """How far a memory reaches within its tenant."""

    TENANT = "tenant"
    SUBJECT = "subject"
    PERSONAL = "personal"


def _ref_key(ref: Ref) -> str:
    # Length-prefixed type, so a ':' inside a type cannot make two refs collide.
    return f"{len(ref.type)}:{ref.type}:{ref.id_text}"


@dataclass(frozen=True, slots=True)
class ScopeTarget:
    """A concrete place to store or look up memories: tenant + scope + its reference."""

    tenant: Ref
    scope: Scope
    subject: Ref | None = None
    actor: Ref | None = None

    def __post_init__(self) -> None:
        if (self.scope is Scope.SUBJECT) != (self.subject is not None):
            raise InvalidArgument("a subject memory needs a subject, and only it has one")
        if (self.scope is Scope.PERSONAL) != (self.actor is not None):
            raise InvalidArgument("a personal memory needs an actor, and only it has one")

    @property
    def key(self) -> str:
        """The ``scope_key`` column value (indexed; what recall and dedup filter on)."""
        if self.scope is Scope.SUBJECT:
            assert self.subject is not None
            return f"subject:{_ref_key(self.subject)}"
        if self.scope is Scope.PERSONAL:
            assert self.actor is not None
            return f"personal:{_ref_key(self.actor)}"
        return "tenant"


def target_for(scope: Scope, tenant: Ref, actor: Ref | None,
               subject: Ref | None) -> ScopeTarget | None:
    """Where a fact of ``scope`` from this session goes, or ``None`` when it must be dropped."""
    if scope is Scope.PERSONAL:
        return ScopeTarget(tenant, scope, actor=actor) if actor is not None else None
    if scope is Scope.SUBJECT:
        return ScopeTarget(tenant, scope, subject=subject) if subject is not None else None
    return ScopeTarget(tenant, Scope.TENANT)


def readable_targets(tenant: Ref, actor: Ref | None, subject: Ref | None) -> list[ScopeTarget]:
    """Every scope a session with these references may recall from."""
    targets = [ScopeTarget(tenant, Scope.TENANT)]
    if subject is not None:
        targets.append(ScopeTarget(tenant, Scope.SUBJECT, subject=subject))
    if actor is not None:
        targets.append(ScopeTarget(tenant, Scope.PERSONAL, actor=actor))
    return targets


def available_scopes(actor: Ref | None, subject: Ref | None) -> list[Scope]:
    """Scopes a session may write (what the extraction prompt offers the model)."""
    scopes = [Scope.TENANT]
    if subject is not None:
        scopes.append(Scope.SUBJECT)
    if actor is not None:
        scopes.append(Scope.PERSONAL)
    return scopes
