"""Memory: durable facts distilled from conversations, recalled by the sessions they apply to.

``keep.memory`` is a ``MemoryService``; see DESIGN.md (Memory) and the README. The names
load on first use (:mod:`chatkeep._exports`): ``chatkeep.memory.scopes`` alone (what the
CLI's options need) does not import the distiller, recall and their stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatkeep._exports import lazy_exports

if TYPE_CHECKING:
    from chatkeep.memory.distiller import Distiller as Distiller
    from chatkeep.memory.distiller import DistilResult as DistilResult
    from chatkeep.memory.recall import Memory as Memory
    from chatkeep.memory.recall import Retriever as Retriever
    from chatkeep.memory.recall import TextRetriever as TextRetriever
    from chatkeep.memory.scopes import Scope as Scope
    from chatkeep.memory.service import DISTIL_JOB as DISTIL_JOB
    from chatkeep.memory.service import MemoryService as MemoryService

#: Each public name, under the module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "chatkeep.memory.distiller": ("Distiller", "DistilResult"),
    "chatkeep.memory.recall": ("Memory", "Retriever", "TextRetriever"),
    "chatkeep.memory.scopes": ("Scope",),
    "chatkeep.memory.service": ("DISTIL_JOB", "MemoryService"),
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
