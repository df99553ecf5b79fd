"""How LangGraph store namespaces name chatkeep memory scopes.

A chatkeep memory belongs to one tenant and, within it, to one scope: tenant-wide, a
subject's, or an actor's own (:mod:`chatkeep.memory.scopes`). A namespace names exactly
that, tenant first, each reference as its ``"type:id"`` text::

    ("organization:7", "tenant")                  the tenant's shared memories
    ("organization:7", "subject", "matter:12")    what is known about matter 12
    ("organization:7", "actor", "user:3")         user 3's personal memories

Searches and listings may name a prefix of these: ``("organization:7",)`` (every scope
of the tenant), ``("organization:7", "subject")`` or ``("organization:7", "actor")``
(every subject's, or every actor's). A prefix never spans tenants: ``()`` and anything
else that does not start with one tenant is refused (``InvalidArgument``, a
``ValueError`` as LangGraph's own ``InvalidNamespaceError`` is), as is any namespace that
does not follow the convention (LangGraph forbids ``.`` in a label, so a reference whose
text holds one cannot be named).
"""

from __future__ import annotations

from dataclasses import dataclass

from chatkeep.errors import InvalidArgument, InvalidReference
from chatkeep.memory.scopes import Scope, ScopeTarget
from chatkeep.refs import Ref

__all__ = ["LABELS", "Namespace", "namespace_of", "parse_namespace", "parse_prefix"]

#: The second label of a namespace, per scope.
LABELS = {Scope.TENANT: "tenant", Scope.SUBJECT: "subject", Scope.PERSONAL: "actor"}
_SCOPES = {label: scope for scope, label in LABELS.items()}


def unmapped(reason: str) -> InvalidArgument:
    """The error for a namespace (or prefix) that names no memory scope of one tenant."""
    return InvalidArgument(f"namespace not mapped to chatkeep memories: {reason}")


@dataclass(frozen=True, slots=True)
class Namespace:
    """A namespace read as a tenant, a scope (``None``: every scope) and the scope's
    subject or actor (``None`` for the tenant scope, or for every subject or actor)."""

    tenant: Ref
    scope: Scope | None = None
    ref: Ref | None = None

    @property
    def complete(self) -> bool:
        """Whether it names one scope (where an item can be written), not a prefix."""
        return self.scope is Scope.TENANT or (self.scope is not None and self.ref is not None)

    @property
    def target(self) -> ScopeTarget:
        """The scope it names (``InvalidArgument`` for a prefix)."""
        if self.scope is Scope.TENANT and self.ref is not None:
            raise unmapped("the tenant scope takes no subject or actor")
        if not self.complete or self.scope is None:
            raise unmapped(f"{self.labels} is a prefix, not one memory scope: name "
                           "(tenant, 'tenant'), (tenant, 'subject', ref) or "
                           "(tenant, 'actor', ref)")
        if self.scope is Scope.SUBJECT:
            return ScopeTarget(self.tenant, self.scope, subject=self.ref)
        if self.scope is Scope.PERSONAL:
            return ScopeTarget(self.tenant, self.scope, actor=self.ref)
        return ScopeTarget(self.tenant, Scope.TENANT)

    @property
    def labels(self) -> tuple[str, ...]:
        """The namespace as LangGraph spells it."""
        labels = [str(self.tenant)]
        if self.scope is not None:
            labels.append(LABELS[self.scope])
        if self.ref is not None:
            labels.append(str(self.ref))
        return tuple(labels)



def parse_prefix(labels: tuple[str, ...]) -> Namespace:
    """A namespace or a prefix of one, read by the convention; ``InvalidArgument`` when
    it does not start with a tenant or does not follow the convention."""
    if not labels:
        raise unmapped("a namespace starts with a tenant ('type:id'): chatkeep never "
                       "reads across tenants")
    if len(labels) > 3:
        raise unmapped(f"{labels} is deeper than any chatkeep memory scope")
    tenant = _ref(labels[0], labels, "tenant")
    if len(labels) == 1:
        return Namespace(tenant)
    scope = _SCOPES.get(labels[1])
    if scope is None:
        raise unmapped(f"{labels}: the second label is the scope, one of "
                       f"{sorted(_SCOPES)}; got {labels[1]!r}")
    if len(labels) == 2:
        return Namespace(tenant, scope)
    if scope is Scope.TENANT:
        raise unmapped(f"{labels}: the tenant scope takes no third label")
    return Namespace(tenant, scope, _ref(labels[2], labels, LABELS[scope]))


def parse_namespace(labels: tuple[str, ...]) -> Namespace:
    """A complete namespace (one scope): what ``get``, ``put`` and ``delete`` take."""
    namespace = parse_prefix(labels)
    namespace.target  # noqa: B018 - raises InvalidArgument for a prefix
    return namespace


def namespace_of(tenant: Ref, scope: Scope | str, ref: Ref | None = None) -> tuple[str, ...]:
    """The namespace of a scope: ``namespace_of(org, "actor", user)`` and the like (the
    scope as chatkeep names it, ``personal``, or as the namespace does, ``actor``)."""
    parsed = _SCOPES.get(str(scope))
    if parsed is None:
        try:
            parsed = Scope(scope)
        except ValueError:
            raise unmapped(f"unknown scope {scope!r}") from None
    namespace = Namespace(tenant, parsed, ref)
    namespace.target  # noqa: B018 - checks the scope has the reference it needs
    for label in namespace.labels:
        if "." in label:
            raise unmapped(f"{label!r} cannot be a namespace label (LangGraph forbids '.')")
    return namespace.labels


def _ref(label: str, labels: tuple[str, ...], what: str) -> Ref:
    try:
        return Ref.parse(label)
    except InvalidReference as exc:
        raise unmapped(f"{labels}: the {what} label must be 'type:id' ({exc})") \
            from exc

