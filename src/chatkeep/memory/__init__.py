"""Memory: durable facts distilled from conversations, recalled by the sessions they apply to.

``keep.memory`` is a ``MemoryService``; see DESIGN.md (Memory) and the README.
"""

from chatkeep.memory.distiller import Distiller, DistilResult
from chatkeep.memory.recall import Memory, Retriever, TextRetriever
from chatkeep.memory.scopes import Scope
from chatkeep.memory.service import DISTIL_JOB, MemoryService

__all__ = [
    "DISTIL_JOB",
    "DistilResult",
    "Distiller",
    "Memory",
    "MemoryService",
    "Retriever",
    "Scope",
    "TextRetriever",
]
