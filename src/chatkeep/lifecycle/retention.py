"""Retention per tenant (``keep.retention``): sessions idle, memories neither recalled
nor updated, for longer than the tenant's policy (or the config's default), and every
memory past its own expiry (``expires_at``, whatever the policy), are deleted by
``sweep``, through the same delete path as ``keep.sessions.delete`` and
``keep.memory.delete`` (vectors, text index and caches with them), skipping held scopes.

A sweep reads candidates in pages by id and deletes each session (each page of memories)
in its own transaction, re-checking there that it is still due and not held, and
skipping a row another sweeper has locked: a rerun is a no-op, and sweepers running at
once do no double work and raise nothing. A memory's recall time is stamped by recall at
the granularity ``memory.recall_stamp_every``, which a window of days never notices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from chatkeep.errors import InvalidArgument
from chatkeep.refs import Ref, require_ref
from chatkeep.store.lifecycle import LifecycleStore
from chatkeep.store.retention import RetentionPolicy, RetentionStore
from chatkeep.validation import MAX_RETENTION_DAYS, check_int, check_retention_days

MAX_DAYS = MAX_RETENTION_DAYS


@dataclass(slots=True)
class SweepReport:
    """What a sweep did: sessions and memories deleted (``expired``: the memories among
    them past their own expiry), those a hold kept, those another sweeper (or a new
    message) took out of its hands."""

    sessions: int = 0
    messages: int = 0
    memories: int = 0
    held: int = 0
    skipped: int = 0
    expired: int = 0

    def to_dict(self) -> dict[str, int]:
        """The report as JSON-ready counts."""
        return asdict(self)


class RetentionService:
    """Per-tenant retention policies and the sweep that applies them (``keep.retention``)."""

    def __init__(self, lifecycle: LifecycleStore, store: RetentionStore, *,
                 session_idle_days: int | None = None, memory_idle_days: int | None = None,
                 on_deleted: Callable[[], None] | None = None) -> None:
        self._lifecycle = lifecycle
        self._store = store
        self._default = (
            check_retention_days(session_idle_days, "privacy.session_retention_days"),
            check_retention_days(memory_idle_days, "privacy.memory_retention_days"))
        self._on_deleted = on_deleted

    def set_policy(self, tenant: Ref, *, session_idle_days: int | None = None,
                   memory_idle_days: int | None = None) -> RetentionPolicy:
        """``tenant``'s policy: delete sessions idle ``session_idle_days`` and memories
        neither recalled nor updated ``memory_idle_days`` (``None``: keep them); replaces
        the default. Memories past their own expiry go whatever the policy."""
        require_ref(tenant, "tenant")
        return self._store.set_policy(
            tenant, check_retention_days(session_idle_days, "session_idle_days"),
            check_retention_days(memory_idle_days, "memory_idle_days"))

    def policy(self, tenant: Ref) -> RetentionPolicy:
        """The policy in force for ``tenant``: its own, else the config's default."""
        require_ref(tenant, "tenant")
        stored = self._store.policies(tenant)
        return stored[0] if stored else RetentionPolicy(tenant, *self._default)

    def clear_policy(self, tenant: Ref) -> bool:
        """Remove ``tenant``'s own policy (the default applies again)."""
        require_ref(tenant, "tenant")
        return self._store.clear_policy(tenant)

    def sweep(self, now: datetime | None = None, *, batch_size: int = 500,
              progress: Callable[[SweepReport], None] | None = None) -> SweepReport:
        """Delete what every tenant's policy says is past retention at ``now`` (default:
        the store's clock), and every memory expired by then, in pages of
        ``batch_size``; ``progress`` is called after each page with the report so far."""
        if now is not None and (not isinstance(now, datetime) or now.tzinfo is None):
            raise InvalidArgument("now must be an aware datetime")
        check_int(batch_size, "batch_size", minimum=1, maximum=100_000)
        moment = (now or self._lifecycle.clock()).astimezone(UTC)
        report = SweepReport()
        stored = self._store.policies()
        own = [p.tenant for p in stored]
        plans: list[tuple[Ref | None, int | None]] = [
            (p.tenant, p.session_idle_days) for p in stored]
        plans.append((None, self._default[0]))
        for tenant, session_days in plans:
            if session_days is not None:
                self._sessions(tenant, moment - timedelta(days=session_days), own,
                               batch_size, report, progress)
        windows = {p.tenant: p.memory_idle_days for p in stored}
        for target in self._memory_targets(windows, moment):
            days = windows[target] if target in windows else self._default[1]
            stale = None if days is None else moment - timedelta(days=days)
            self._memories(target, stale, moment, batch_size, report, progress)
        self._settled(report)
        return report

    def _memory_targets(self, windows: dict[Ref, int | None], now: datetime) -> list[Ref]:
        """The tenants whose memories the sweep looks at: every tenant with memories when
        the default has a window; else those with a window of their own and those with
        expired memories (found on the expiry index, not by visiting every tenant)."""
        if self._default[1] is not None:
            return self._store.tenants_with_memories([])
        targets = [t for t, days in windows.items() if days is not None]
        return targets + [t for t in self._store.tenants_with_expired(now)
                          if t not in targets]

    def sweep_expired(self, tenant: Ref | None = None, now: datetime | None = None, *,
                      batch_size: int = 500) -> SweepReport:
        """Only the memories past their own expiry at ``now`` (``tenant``'s, or every
        tenant's): the part of :meth:`sweep` a LangGraph store's ``sweep_ttl`` runs, through
        the same delete, skipping held scopes."""
        if tenant is not None:
            require_ref(tenant, "tenant")
        if now is not None and (not isinstance(now, datetime) or now.tzinfo is None):
            raise InvalidArgument("now must be an aware datetime")
        check_int(batch_size, "batch_size", minimum=1, maximum=100_000)
        moment = (now or self._lifecycle.clock()).astimezone(UTC)
        report = SweepReport()
        targets = [tenant] if tenant is not None else self._store.tenants_with_expired(moment)
        for target in targets:
            self._memories(target, None, moment, batch_size, report, None)
        self._settled(report)
        return report

    def _settled(self, report: SweepReport) -> None:
        if report.sessions or report.memories:
            self._lifecycle.settle()
            if self._on_deleted is not None:
                self._on_deleted()

    def _sessions(self, tenant: Ref | None, idle_before: datetime, own: list[Ref],
                  batch_size: int, report: SweepReport,
                  progress: Callable[[SweepReport], None] | None) -> None:
        after = ""
        while True:
            page = self._store.idle_sessions(tenant, idle_before, after, batch_size,
                                             excluding=own if tenant is None else [])
            if not page:
                return
            for session_id, owner in page:
                status, counts = self._lifecycle.expire_session(session_id, owner,
                                                                idle_before)
                if status == "deleted":
                    report.sessions += 1
                    report.messages += counts.get("messages", 0)
                    report.memories += counts.get("memories", 0)
                elif status == "held":
                    report.held += 1
                else:
                    report.skipped += 1
            after = page[-1][0]
            if progress is not None:
                progress(report)

    def _memories(self, tenant: Ref, stale_before: datetime | None, now: datetime,
                  batch_size: int, report: SweepReport,
                  progress: Callable[[SweepReport], None] | None) -> None:
        after: int | None = 0
        while after is not None:
            deleted, expired, held, after = self._lifecycle.expire_memories(
                tenant, stale_before, now, batch_size, after)
            report.memories += deleted
            report.expired += expired
            report.held += held
            if progress is not None and after is not None:
                progress(report)
