"""Erase an actor, a subject or a whole tenant: the plan applied in bounded, resumable
batches, then the receipt.

Each batch is one transaction that re-checks the holds and moves the job's counts with
the rows it deletes (:class:`chatkeep.store.lifecycle.LifecycleStore`), so a run killed
anywhere leaves a consistent state, and the next run of the same scope resumes that job
and finishes it. Memories go first, then each session's messages ``batch_size`` at a
time, then the rest of the session: memory use follows the batch, not the person's
history. After the last batch the store is re-planned (anything written meanwhile is
erased too), the deletes are made final on disk, and caches are emptied.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from chatkeep.errors import InvalidArgument
from chatkeep.lifecycle.plan import KEPT_WHY, ErasurePlan, plan_erasure
from chatkeep.lifecycle.receipt import ErasureCheck, ErasureReceipt, check_receipt
from chatkeep.refs import Ref, require_ref
from chatkeep.store.lifecycle import EraseScope, ErasureJob, LifecycleStore, refuse_held
from chatkeep.validation import INT32_MAX, NAME_MAX, check_int, check_text

Progress = Callable[[dict[str, int]], None]
"""Called after each batch with the counts so far (long runs report progress)."""
ROUNDS = 3
"""Re-plans after the first apply: what was written meanwhile is erased too."""


def erase_scope(tenant: Ref, actor: Ref | None, subject: Ref | None,
                whole_tenant: bool) -> EraseScope:
    """The scope ``keep.erase`` was asked for: exactly one of ``actor``, ``subject`` and
    ``whole_tenant`` (else ``InvalidArgument``)."""
    require_ref(tenant, "tenant")
    if not isinstance(whole_tenant, bool):
        raise InvalidArgument(f"whole_tenant must be True or False, got {whole_tenant!r}")
    chosen = [n for n, v in (("actor", actor), ("subject", subject)) if v is not None]
    if whole_tenant:
        chosen.append("whole_tenant")
    if len(chosen) != 1:
        raise InvalidArgument("erase takes exactly one of actor=, subject= or "
                              f"whole_tenant=True (got {', '.join(chosen) or 'none'})")
    if actor is not None:
        return EraseScope("actor", tenant, ref=require_ref(actor, "actor"))
    if subject is not None:
        return EraseScope("subject", tenant, ref=require_ref(subject, "subject"))
    return EraseScope("tenant", tenant)


def _iso(moment: datetime) -> str:
    return moment.replace(microsecond=0).isoformat()


class Eraser:
    """Plans, applies and verifies erasures over one :class:`LifecycleStore`."""

    def __init__(self, store: LifecycleStore,
                 on_erased: Callable[[], None] | None = None) -> None:
        self.store = store
        self.on_erased = on_erased

    def plan(self, scope: EraseScope) -> ErasurePlan:
        """What erasing ``scope`` would remove now (nothing is written)."""
        return plan_erasure(self.store.inventory(scope))

    def erase(self, scope: EraseScope, *, by: str | None = None, batch_size: int = 1000,
              progress: Progress | None = None) -> ErasureReceipt:
        """Erase ``scope`` (refused with ``ScopeOnHold`` before anything is removed when a
        hold is in the way; a hold placed meanwhile stops the next batch), resuming a
        killed run of the same scope; returns the sealed receipt."""
        check_int(batch_size, "batch_size", minimum=1, maximum=INT32_MAX)
        if by is not None:
            check_text(by, "by", max_length=NAME_MAX)
        plan = self.plan(scope)
        refuse_held(scope, plan.holds)
        job = self.store.begin_erasure(scope, by)
        for _ in range(ROUNDS):
            self._apply(job, plan, batch_size, progress)
            plan = self.plan(scope)
            refuse_held(scope, plan.holds)
            if plan.empty:
                break
        self.store.settle()
        if self.on_erased is not None:
            self.on_erased()
        return self._finish(job)

    def _apply(self, job: ErasureJob, plan: ErasurePlan, batch_size: int,
               progress: Progress | None) -> None:
        kept = [i for i, _ in plan.keep_memories]
        doomed = plan.erase_memories
        for start in range(0, max(len(doomed), len(kept)), batch_size):
            self.store.erase_memories(job, doomed[start:start + batch_size],
                                      kept[start:start + batch_size], plan.sessions)
            if progress is not None:
                progress(dict(job.counts))
        for parties in plan.sessions:
            while self.store.erase_messages(job, parties, batch_size):
                if progress is not None:
                    progress(dict(job.counts))
            self.store.erase_session(job, parties)
            if progress is not None:
                progress(dict(job.counts))

    def _finish(self, job: ErasureJob) -> ErasureReceipt:
        recorded = self.store.erasure(job.id)
        assert recorded is not None
        finished = self.store.clock()
        scope_type, scope_id = job.scope.columns
        receipt = ErasureReceipt(
            erasure_id=job.id, tenant=str(job.scope.tenant),
            scope={"kind": job.scope.kind, "type": scope_type, "id": scope_id},
            started_at=_iso(job.started_at), finished_at=_iso(finished),
            counts=dict(sorted(recorded.counts.items())),
            session_ids=recorded.items.get("session", []),
            memory_ids=recorded.items.get("memory", []),
            kept=[{"memory_id": i, "why": KEPT_WHY.format(kind="tenant or subject")}
                  for i in recorded.items.get("kept", [])]).sealed()
        self.store.finish_erasure(job, receipt.digest, finished)
        return receipt

    def verify(self, receipt: ErasureReceipt) -> ErasureCheck:
        """Check ``receipt`` against this store: its digest, the store's own record of
        the erasure (digest, counts, ids), none of its ids still stored, nothing of its
        scope left."""
        recorded = self.store.erasure(receipt.erasure_id)
        record = None
        still: list[str] = []
        left: dict[str, int] = {}
        if recorded is not None:
            record = {"digest": recorded.digest,
                      "counts": dict(sorted(recorded.counts.items())),
                      "session_ids": recorded.items.get("session", []),
                      "memory_ids": recorded.items.get("memory", [])}
            sessions, found = self.store.present(
                recorded.scope.tenant, receipt.session_ids,
                [int(i) for i in receipt.memory_ids if str(i).isdigit()])
            still = [f"session {i}" for i in sessions] + [f"memory {i}" for i in found]
            now = self.plan(recorded.scope)
            left = {"sessions": len(now.sessions), "messages": now.messages,
                    "memories": len(now.erase_memories)}
        return check_receipt(receipt, record, still, left)
