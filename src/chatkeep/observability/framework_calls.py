"""Spans for the model calls a framework makes while chatkeep is in its path.

The Agents SDK, Pydantic AI and LangChain call their models themselves; chatkeep sees each
request leave (it scrubs it, reserves the tenant's quota) and each response come back (it
bills it). :func:`model_call` opens a ``chat {model}`` client span around that stretch,
with the same GenAI attributes and metrics as chatkeep's own calls
(:func:`chatkeep.observability.tracing.chat`): operation, provider, request and response
model, the usage the response reported, the tenant, session and purpose. It never holds a
value of the conversation: content goes on the span only when capture is on, and only the
body the egress returned.

Without ``opentelemetry`` installed :func:`model_call` yields a :class:`CallRecord` that
records nothing and imports nothing; with the API and no provider the span is the API's
non-recording one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chatkeep.observability import attributes as a
from chatkeep.observability import capture, metrics

if TYPE_CHECKING:
    from chatkeep.refs import Ref


@dataclass
class CallRecord:
    """What the framework's response said, set by the adapter before the block ends."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    response_model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def usage(self, input_tokens: int | None, output_tokens: int | None,
              response_model: str | None = None) -> None:
        """The response's reported usage (``None`` where it reported none) and model."""
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        if response_model:
            self.response_model = response_model


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
    record = CallRecord()
    if not metrics.ON:
        yield record
        return
    from chatkeep.observability.tracing import _client_kind, _failed, tracer

    with a.scoped(tenant, session_id, "chat") as scope:
        base: dict[str, Any] = {a.OPERATION: a.CHAT, a.PROVIDER: provider,
                                a.REQUEST_MODEL: model, **scope.attributes()}
        attrs = {**base, a.CONVERSATION_ID: session_id, a.FRAMEWORK: framework}
        if max_tokens is not None:
            attrs[a.REQUEST_MAX_TOKENS] = max_tokens
        started = time.perf_counter()
        opened = (tracer().start_as_current_span(f"chat {model}", kind=_client_kind(),
                                                 attributes=attrs) if current else
                  _ended(tracer().start_span(f"chat {model}", kind=_client_kind(),
                                             attributes=attrs)))
        with opened as span:
            if body is not None and capture.capture_enabled() and span.is_recording():
                span.set_attribute(a.INPUT_MESSAGES, capture.input_messages(body))
            try:
                yield record
            except BaseException as exc:
                _failed(base, span, exc)
                metrics.record_duration(base, time.perf_counter() - started)
                raise
            _finish(span, base, record)
            metrics.record_duration(base, time.perf_counter() - started)


def _finish(span: Any, base: dict[str, Any], record: CallRecord) -> None:
    if record.response_model:
        base[a.RESPONSE_MODEL] = record.response_model
        span.set_attribute(a.RESPONSE_MODEL, record.response_model)
    if record.input_tokens is not None:
        span.set_attribute(a.INPUT_TOKENS, record.input_tokens)
    if record.output_tokens is not None:
        span.set_attribute(a.OUTPUT_TOKENS, record.output_tokens)
    if record.input_tokens is not None or record.output_tokens is not None:
        metrics.record_tokens(base, record.input_tokens, record.output_tokens)


@contextlib.contextmanager
def _ended(span: Any) -> Iterator[Any]:
    """``span`` (started, not current) ended when the block leaves, as
    ``start_as_current_span`` would; an exception is recorded on it first."""
    try:
        yield span
    except BaseException as exc:
        span.record_exception(exc)
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
        raise
    finally:
        span.end()
