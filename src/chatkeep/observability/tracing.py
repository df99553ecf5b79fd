"""chatkeep's spans: the hooks the round, the guarded model, the fold, the distiller and
the embedding requests call when :data:`ON` (the API is importable).

``opentelemetry.trace`` is imported on the first span, never at import: a process without
the extra pays one attribute check per hook and imports nothing of it. With the API and no
provider, the spans are the API's non-recording ones and their attributes are not even
computed (``is_recording``). Spans and names follow the GenAI conventions: ``chat {model}``
and ``embeddings {model}`` (client spans), ``update_memory chatkeep.summary`` (a fold) and
``update_memory chatkeep.memories`` (a distillation), and ``chatkeep.build_history``, the
round that every model call of a turn nests in.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from chatkeep.observability import attributes as a
from chatkeep.observability import capture, metrics

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from chatkeep.history.round import HistoryRound
    from chatkeep.llm.base import ChatModel, Completion
    from chatkeep.memory.embedders.base import Embedder
    from chatkeep.refs import Ref
    from chatkeep.sessions import ChatSession

T = TypeVar("T")
R = TypeVar("R", bound=Sequence[Any])

ON = metrics.ON
"""Whether the hooks run: ``opentelemetry`` is importable (checked without importing it)."""

ALWAYS = False
"""Run the round's hooks even while no provider is set (``bench/otel.py`` measures the
API's own cost that way); otherwise :func:`live` skips them then."""

_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_\d+>")
_tracers: list[Tracer] = []


def live() -> bool:
    """Whether the round's telemetry has anywhere to go now: the API is importable and
    the application set a tracer or a meter provider (until one does, the API's proxies
    drop every span and measurement, so the hooks of each ``build_history`` would only
    cost time). Checked per call: a provider set later is seen at the next round."""
    if not ON:
        return False
    if ALWAYS:
        return True
    if not _providers:
        from opentelemetry import metrics as otel_metrics
        from opentelemetry import trace

        _providers.extend([trace.get_tracer_provider, otel_metrics.get_meter_provider,
                           trace.ProxyTracerProvider])
    tracers, meters, proxy = _providers
    return type(tracers()) is not proxy or \
        type(meters()).__name__ != "_ProxyMeterProvider"


_providers: list[Any] = []
"""The API's provider getters and its proxy class, imported on the first check."""


def tracer() -> Tracer:
    """chatkeep's tracer (the API's proxy until the application sets a provider)."""
    if not _tracers:
        from opentelemetry import trace

        _tracers.append(trace.get_tracer("chatkeep", a.version()))
    return _tracers[0]


def _client_kind() -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind.CLIENT


def provider_of(model: object) -> str:
    """``gen_ai.provider.name`` of a model: its own ``provider_name``, else read from the
    client class it wraps (``openai``, ``anthropic``), else the class name."""
    seen = model
    for _ in range(4):
        declared = getattr(seen, "provider_name", None)
        if isinstance(declared, str):
            return declared
        name = f"{type(seen).__module__}.{type(seen).__name__}".lower()
        for known in ("anthropic", "openai"):
            if known in name:
                return known
        inner = next((getattr(seen, attr) for attr in ("inner", "model", "client")
                      if not isinstance(getattr(seen, attr, None), (str, type(None)))), None)
        if inner is None:
            break
        seen = inner
    return type(model).__name__


def _failed(base: dict[str, Any], span: Span, exc: BaseException) -> None:
    base[a.ERROR_TYPE] = type(exc).__qualname__
    span.set_attribute(a.ERROR_TYPE, base[a.ERROR_TYPE])


def chat(inner: ChatModel, body: list[dict[str, Any]], send: Callable[[], Completion], *,
         model: str, max_tokens: int | None, temperature: float | None,
         json_mode: bool) -> Completion:
    """``send()`` (the guarded model's call of ``inner`` with ``body``) in a ``chat {model}``
    span: ``body`` is what the egress returned, the only content a span may carry (when
    capture is on). The call itself stays in the guard, the one place allowed to make
    it."""
    scope = a.current_scope()
    base: dict[str, Any] = {a.OPERATION: a.CHAT, a.PROVIDER: provider_of(inner),
                            a.REQUEST_MODEL: model, **scope.attributes()}
    attrs = dict(base)
    if max_tokens is not None:
        attrs[a.REQUEST_MAX_TOKENS] = max_tokens
    if temperature is not None:
        attrs[a.REQUEST_TEMPERATURE] = temperature
    if json_mode:
        attrs[a.OUTPUT_TYPE] = "json"
    if scope.session_id is not None:
        attrs[a.CONVERSATION_ID] = scope.session_id
    with chat_span(base, attrs, model, body) as record:
        completion = send()
        usage = completion.usage
        record.usage(None if usage is None else usage.prompt_tokens,
                     None if usage is None else usage.completion_tokens, completion.model)
    return completion


@dataclass
class CallRecord:
    """What a model call's response said, set before its :func:`chat_span` ends."""

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
def chat_span(base: dict[str, Any], attrs: dict[str, Any], model: str, body: Any, *,
              current: bool = True) -> Iterator[CallRecord]:
    """The block of one model call, in a ``chat {model}`` client span with ``attrs``
    (``base``: the attributes its metrics carry too). ``body`` is the request as the
    egress returned it, captured only when capture is on; ``current=False`` for a block
    that yields to its caller while open (a stream): the span is then not made the
    context's current one. Set the response's usage on the yielded record; an exception
    leaving the block marks the span with ``error.type`` and is raised on. Both chatkeep's
    own calls (:func:`chat`) and a framework's (:mod:`.framework_calls`) run in one."""
    record = CallRecord()
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


def embed(embedder: Embedder, send: Callable[[], list[list[float]]]) -> list[list[float]]:
    """``send()`` (the retriever's one embeddings request, its texts already masked) in an
    ``embeddings {model}`` span; ``embedder`` names the model and provider."""
    scope = a.current_scope()
    model = embedder.model
    base: dict[str, Any] = {a.OPERATION: a.EMBEDDINGS, a.PROVIDER: provider_of(embedder),
                            a.REQUEST_MODEL: model, **scope.attributes()}
    started = time.perf_counter()
    with tracer().start_as_current_span(f"embeddings {model}", kind=_client_kind(),
                                        attributes=base) as span:
        try:
            vectors = send()
        except BaseException as exc:
            _failed(base, span, exc)
            metrics.record_duration(base, time.perf_counter() - started)
            raise
        if vectors and span.is_recording():
            span.set_attribute(a.EMBEDDING_DIMENSIONS, len(vectors[0]))
        metrics.record_duration(base, time.perf_counter() - started)
    return vectors


def read_history(read: Callable[[str], T], session_id: str) -> T:
    """The round's store read, timed (``chatkeep.store.duration``); the messages it read
    after the watermark go on the round's span (``chatkeep.history.messages_in``)."""
    started = time.perf_counter()
    result = read(session_id)
    metrics.record_store_duration("read_history", time.perf_counter() - started)
    from opentelemetry import trace

    span = trace.get_current_span()
    if span.is_recording() and isinstance(result, tuple) and len(result) == 3:
        span.set_attribute(a.MESSAGES_IN, len(result[2]))
    return result


def build_history(rnd: HistoryRound, build: Callable[[], T]) -> T:
    """One ``build_history`` round in a ``chatkeep.build_history`` span: what went in and
    out, the tokens, whether it folded, the summary's version and watermark, the recalled
    memory ids and how many placeholders the body holds (a count, never a value)."""
    session = rnd.session
    with a.scoped(session.tenant, session.id, "chat"), \
            tracer().start_as_current_span("chatkeep.build_history") as span:
        history = build()
        if span.is_recording():
            info = getattr(history, "info", None)
            row = session.row
            attrs: dict[str, Any] = {
                **a.current_scope().attributes(), a.CONVERSATION_ID: session.id,
                a.FORMAT: rnd.format, a.MESSAGES_OUT: len(history),  # type: ignore[arg-type]
                a.SUMMARY_VERSION: row.summary_version, a.WATERMARK: row.summary_watermark,
                a.RECALLED: [str(m) for m in rnd.recalled_ids],
                a.REDACTIONS: _placeholders(history)}
            if info is not None:
                attrs.update({a.TOKENS: info.tokens, a.BUDGET: info.budget,
                              a.FOLDED: info.compressed, a.SUMMARY_FAILED: info.summary_failed,
                              a.OVER_BUDGET: info.over_budget_reason is not None})
            span.set_attributes(attrs)
    return history


def _placeholders(history: Any) -> int:
    """How many placeholders the outgoing body holds (its redactions, counted)."""
    text = json.dumps([list(history), getattr(history, "system", None)],
                      ensure_ascii=False, default=str)
    return len(_PLACEHOLDER.findall(text))


def fold(session: ChatSession, messages: Sequence[object], summarize: Callable[[], T]) -> T:
    """One fold (the summarizer's calls and what they made) in an ``update_memory
    chatkeep.summary`` span; counts it in ``chatkeep.folds`` by outcome."""
    with a.scoped(session.tenant, session.id, "summary") as scope, \
            tracer().start_as_current_span(
                f"{a.UPDATE_MEMORY} {a.STORE_SUMMARY}",
                attributes={a.OPERATION: a.UPDATE_MEMORY, a.MEMORY_STORE_ID: a.STORE_SUMMARY,
                            a.CONVERSATION_ID: session.id, a.FOLD_MESSAGES: len(messages),
                            **scope.attributes()}) as span:
        result = summarize()
        outcome = _fold_outcome(result)
        span.set_attribute(a.FOLD_OUTCOME, outcome)
        cost = getattr(result, "cost", None)
        if isinstance(cost, dict):
            span.set_attributes({a.FOLD_CALLS: int(cost.get("calls") or 0),
                                 a.INPUT_TOKENS: int(cost.get("prompt_tokens") or 0),
                                 a.OUTPUT_TOKENS: int(cost.get("completion_tokens") or 0)})
        metrics.record_fold(scope.tenant, outcome)
        if outcome == "refused" and scope.tenant is not None:
            metrics.record_quota_refusal(scope.tenant, "summary")
    return result


def _fold_outcome(result: object) -> str:
    if result is None:
        return "failed"
    if hasattr(result, "through"):
        return "folded"
    if getattr(result, "quota", False):
        return "refused"
    return "lost_race" if hasattr(result, "what") else "deferred"


def distil(session: ChatSession, run: Callable[[], T]) -> T:
    """One distillation in an ``update_memory chatkeep.memories`` span: the memory ids it
    wrote and how many model calls it made."""
    with a.scoped(session.tenant, session.id, "distil") as scope, \
            tracer().start_as_current_span(
                f"{a.UPDATE_MEMORY} {a.STORE_MEMORIES}",
                attributes={a.OPERATION: a.UPDATE_MEMORY, a.MEMORY_STORE_ID: a.STORE_MEMORIES,
                            a.CONVERSATION_ID: session.id, **scope.attributes()}) as span:
        result = run()
        if span.is_recording():
            ids = [str(i) for i in getattr(result, "memory_ids", ())]
            span.set_attributes({a.MEMORIES_ADDED: len(ids), a.MEMORY_IDS: ids})
    return result


def search_memory(tenant: Ref, session_id: str | None, run: Callable[[], R]) -> R:
    """One recall in a ``search_memory chatkeep.memories`` span: how many memories it
    found and their ids (never their text, never the query)."""
    with a.scoped(tenant, session_id or "", "chat") as scope, \
            tracer().start_as_current_span(
                f"{a.SEARCH_MEMORY} {a.STORE_MEMORIES}",
                attributes={a.OPERATION: a.SEARCH_MEMORY, a.MEMORY_STORE_ID: a.STORE_MEMORIES,
                            **scope.attributes()}) as span:
        result = run()
        if span.is_recording():
            ids = [str(getattr(m, "id", "")) for m in result]
            if session_id:
                span.set_attribute(a.CONVERSATION_ID, session_id)
            span.set_attributes({a.MEMORIES_FOUND: len(ids), a.MEMORY_IDS: ids})
    return result
