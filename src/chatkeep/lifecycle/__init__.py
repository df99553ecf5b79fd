"""Forgetting, with proof (issue 36): delete a conversation, erase an actor, a subject or
a tenant, legal holds, retention per tenant.

``plan`` decides what an erasure removes (pure), ``erase`` applies it in resumable
batches, ``receipt`` is the proof and its check, ``holds`` the legal holds, ``caches``
what the process forgets, ``retention`` the sweep; their SQL is
:mod:`chatkeep.store.lifecycle`.
"""

from __future__ import annotations

from chatkeep.lifecycle.erase import Eraser, erase_scope
from chatkeep.lifecycle.holds import HoldService
from chatkeep.lifecycle.plan import ErasurePlan, plan_erasure
from chatkeep.lifecycle.receipt import ErasureCheck, ErasureReceipt
from chatkeep.store.lifecycle import EraseScope, HoldRow

__all__ = [
           "EraseScope",
           "Eraser",
           "ErasureCheck",
           "ErasurePlan",
           "ErasureReceipt",
           "HoldRow",
           "HoldService",
           "erase_scope",
           "plan_erasure",
]
