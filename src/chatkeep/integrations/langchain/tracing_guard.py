"""LangSmith tracing beside a redacting thread: refused unless it hides content.

LangChain's tracer sends each run's inputs and outputs to LangSmith: the graph state,
which holds the user's raw text (chatkeep scrubs each model request as it leaves, not the
state), and the answers with real values restored. No hook of the middleware sees those
posts, so a process that traces content cannot run a redacting thread: the middleware
refuses with ``PrivacyError`` when it is made (tracing on in the environment) and before
each model call (tracing turned on later), unless LangSmith is told to hide inputs and
outputs (``LANGSMITH_HIDE_INPUTS=true`` and ``LANGSMITH_HIDE_OUTPUTS=true``): its traces
then keep names, timings and token counts.
"""

from __future__ import annotations

import os

from chatkeep.errors import PrivacyError

__all__ = ["refuse_traced_content", "traces_content"]


def traces_content() -> bool:
    """Whether LangSmith tracing is on here and would send runs' inputs or outputs."""
    try:
        from langsmith import run_helpers
    except ImportError:  # no LangSmith, no tracer to send anything
        return False
    chosen = run_helpers.get_tracing_context()["enabled"]  # tracing_context(enabled=...)
    if chosen is not None:
        enabled = chosen is True
    else:
        enabled = run_helpers.get_current_run_tree() is not None or \
            _env("TRACING_V2", "TRACING") == "true"
    hidden = _env("HIDE_INPUTS") == "true" and _env("HIDE_OUTPUTS") == "true"
    return enabled and not hidden


def _env(*names: str) -> str | None:
    """A LangSmith setting as the environment holds it now (``LANGSMITH_`` or
    ``LANGCHAIN_``; LangSmith's own reader caches its first answer)."""
    for name in names:
        for namespace in ("LANGSMITH", "LANGCHAIN"):
            value = os.environ.get(f"{namespace}_{name}")
            if value is not None:
                return value.strip().lower()
    return None


def refuse_traced_content(redacting: bool) -> None:
    """``PrivacyError`` when a redacting thread would run under content tracing."""
    if redacting and traces_content():
        raise PrivacyError(
            "LangSmith tracing is on and sends runs' inputs and outputs, which hold the "
            "thread's raw values; the thread redacts. Set LANGSMITH_HIDE_INPUTS=true and "
            "LANGSMITH_HIDE_OUTPUTS=true (traces keep names, timings and tokens), or turn "
            "tracing off; nothing was sent")
