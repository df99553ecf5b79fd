"""LangChain v1 and LangGraph on chatkeep (``pip install 'chatkeep[langchain]'``).

* :class:`ChatkeepMiddleware`: agent middleware for ``create_agent``. Each model call goes
  out with the session's budgeted, redacted history (the thread's state is never
  rewritten), and what the thread adds is recorded in the session named by its
  ``thread_id``.
* :class:`ChatkeepStore`: a LangGraph ``BaseStore`` over chatkeep's memories, namespaced
  by tenant and scope (see :mod:`chatkeep.integrations.langchain.namespaces`); ``search``
  is chatkeep's hybrid recall, and no operation ever reaches another tenant.
* :class:`ChatkeepSaver`: a LangGraph checkpointer on chatkeep's store, scoped by tenant;
  a checkpoint refers to the session's log for its messages (each stored once).
"""

from __future__ import annotations

try:
    import langchain.agents  # noqa: F401
    import langgraph.store.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is in the dev set
    # The ImportError as raised, its message naming the extra to install.
    exc.msg = (f"chatkeep.integrations.langchain needs LangChain v1: pip install "
               f"'chatkeep[langchain]' ({exc.msg})")
    raise

from chatkeep.integrations.langchain.middleware import ChatkeepMiddleware, Thread
from chatkeep.integrations.langchain.namespaces import Namespace, namespace_of, parse_namespace
from chatkeep.integrations.langchain.saver import ChatkeepSaver
from chatkeep.integrations.langchain.store import ChatkeepStore

__all__ = [
    "ChatkeepMiddleware",
    "ChatkeepSaver",
    "ChatkeepStore",
    "Namespace",
    "Thread",
    "namespace_of",
    "parse_namespace",
]
