"""Spans for the model calls a framework makes while chatkeep is in its path.

The Agents SDK, Pydantic AI and LangChain call their models themselves; chatkeep sees each
request leave (it scrubs it, reserves the tenant's quota) and each response come back (it
bills it). :func:`model_call` opens a ``chat {model}`` client span around that stretch,
with the same GenAI attributes and metrics as chatkeep's own calls
(:func:`chatkeep.observability.tracing.chat`), in the same span helper
(:func:`~chatkeep.observability.tracing.chat_span`): operation, provider, request and response
model, the usage the response reported, the tenant, session and purpose. It never holds a
value of the conversation: content goes on the span only when capture is on, and only the
body the egress returned.

Without ``opentelemetry`` installed :func:`model_call` yields a :class:`CallRecord` that
records nothing and imports nothing; with the API and no provider the span is the API's
non-recording one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from chatkeep.observability import attributes as a
from chatkeep.observability import metrics
from chatkeep.observability.tracing import CallRecord, chat_span

if TYPE_CHECKING:
    from chatkeep.refs import Ref


@contextlib.contextmanager
def untraced() -> Iterator[CallRecord]:
    """A block that records nothing (OpenTelemetry off, or no owner to name)."""
    yield CallRecord()


@contextlib.contextmanager
def model_call(tenant: Ref, session_id: str, *, model: str, provider: str,
               framework: str, max_tokens: int | None = None,
               body: Sequence[dict[str, Any]] | None = None,
               current: bool = True) -> Iterator[CallRecord]:
    """The block in which a framework's model call runs, as a ``chat {model}`` span.

    ``framework`` goes on ``chatkeep.framework`` (``openai_agents``, ``pydantic_ai``,
    ``langchain``); ``body`` is the request as the egress returned it (captured only when
    capture is on); ``current=False`` for a block that yields to its caller while open (a
    stream): the span is then not made the context's current one. Set the response's
    usage on the yielded record; an exception leaving the block marks the span with
    ``error.type`` and is raised on."""
    if not metrics.ON:
        yield CallRecord()
        return
    with a.scoped(tenant, session_id, "chat") as scope:
        base: dict[str, Any] = {a.OPERATION: a.CHAT, a.PROVIDER: provider,
                                a.REQUEST_MODEL: model, **scope.attributes()}
        attrs = {**base, a.CONVERSATION_ID: session_id, a.FRAMEWORK: framework}
        if max_tokens is not None:
            attrs[a.REQUEST_MAX_TOKENS] = max_tokens
        with chat_span(base, attrs, model, body, current=current) as record:
            yield record


__all__ = ["CallRecord", "model_call", "untraced"]
