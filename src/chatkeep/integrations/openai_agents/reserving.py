"""Every model request of an Agents SDK run reserved on the tenant's quota (issue 33).

:class:`RequestQuota` holds one request's tokens through ``keep.quotas`` (the chatkeep
session's tenant and actor, purpose ``chat``): the request's input as the keep's token
counter counts it (instructions, input items and the tools' definitions) plus its output
ceiling (the resolved ``ModelSettings.max_tokens``, else ``quotas.output_ceiling``).
:class:`QuotaModel` wraps an SDK ``Model`` so that each ``get_response`` and
``stream_response`` call is reserved before anything is sent (``QuotaExceeded``, nothing
sent, when it does not fit), settled at the usage the response reports (at its reserved
amount when it reports none, as a Pydantic AI run's), and released when the call fails
before its response. A stream that ends without its final event after the first one
arrived counts at the reserved amount (the provider may have billed it).
:class:`QuotaProvider` wraps a ``ModelProvider`` the same way, for agents that name
their model by name.

Each request also runs in a ``chat {model}`` OpenTelemetry span
(:func:`chatkeep.observability.framework_calls.model_call`: the GenAI attributes, the
usage the response reported, the tenant and session; nothing without the ``otel`` extra).

Imports the SDK: :class:`ChatkeepSession` imports this module when a run needs it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agents.models.interface import Model, ModelProvider

from chatkeep.observability import framework_calls, tracing

if TYPE_CHECKING:
    from chatkeep.aio import AsyncReservation
    from chatkeep.refs import Ref
    from chatkeep.tokens import TokenCounter

log = logging.getLogger("chatkeep.integrations.openai_agents")

__all__ = ["QuotaModel", "QuotaProvider", "RequestQuota", "request_text"]

#: The stream events that end a response (each carries it, with its usage).
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _plain(value: Any) -> Any:
    """SDK values (pydantic models, lists of them) as plain JSON-like values."""
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    dump = getattr(value, "model_dump", None)
    return dump(exclude_unset=True) if callable(dump) else value


def _definition(tool: Any) -> Any:
    """What the model is told of a tool (or a handoff): its name, description and
    parameters."""
    return [getattr(tool, "name", None) or getattr(tool, "tool_name", None),
            getattr(tool, "description", None) or getattr(tool, "tool_description", None),
            getattr(tool, "params_json_schema", None) or getattr(tool, "input_json_schema",
                                                                  None)]


def request_text(instructions: str | None, input: Any, tools: Any = (),
                 handoffs: Any = ()) -> str:
    """The text of one model request a reservation counts: instructions, input items and
    the definitions of the tools and handoffs offered."""
    return json.dumps([instructions or "", _plain(input if isinstance(input, list) else
                                                  [input]),
                       [_definition(tool) for tool in [*(tools or ()), *(handoffs or ())]]],
                      ensure_ascii=False, default=str)


class RequestQuota:
    """Reserves and settles the model requests of one session's runs.

    ``reserve(tokens)``: ``keep.quotas.reserve`` for the session (raises
    ``QuotaExceeded``); ``counter()``: the keep's token counter; ``ceiling``: the output
    tokens held for a request whose settings name no ``max_tokens``; ``applies()``:
    whether a quota applies to the session now (a read: without one, nothing is counted
    or written)."""

    def __init__(self, reserve: Callable[[int], Awaitable[AsyncReservation]],
                 counter: Callable[[], Awaitable[TokenCounter]], ceiling: int,
                 applies: Callable[[], Awaitable[bool]],
                 owner: Callable[[], Awaitable[tuple[Ref, str]]] | None = None) -> None:
        self._reserve = reserve
        self._counter = counter
        self._applies = applies
        self._owner = owner
        self.ceiling = ceiling

    async def traced(self, model: Any, settings: Any, *, current: bool = True,
                     ) -> Any:
        """The ``chat {model}`` span one request of ``model`` runs in (a no-op context
        without OpenTelemetry or an owner: the session's tenant and id)."""
        if self._owner is None or not tracing.ON:
            return framework_calls.untraced()
        tenant, session_id = await self._owner()
        limit = getattr(settings, "max_tokens", None)
        return framework_calls.model_call(
            tenant, session_id, model=str(getattr(model, "model", None) or type(model).__name__),
            provider=tracing.provider_of(model), framework="openai_agents",
            max_tokens=limit if isinstance(limit, int) else None, current=current)

    def output_ceiling(self, settings: Any) -> int:
        """The output tokens a request with ``settings`` may write."""
        limit = getattr(settings, "max_tokens", None)
        return limit if isinstance(limit, int) and limit > 0 else self.ceiling

    async def hold(self, instructions: str | None, input: Any, settings: Any,
                   tools: Any = (), handoffs: Any = ()) -> AsyncReservation | None:
        """Reserve one request: its input as the counter counts it plus its output
        ceiling (``QuotaExceeded`` when it does not fit, nothing written); ``None`` when
        no quota applies."""
        if not await self._applies():
            return None
        count = (await self._counter()).count
        asked = count(request_text(instructions, input, tools, handoffs))
        return await self._reserve(asked + self.output_ceiling(settings))

    @staticmethod
    async def settle(held: AsyncReservation | None, usage: Any) -> None:
        """Settle ``held`` at the response's usage (input plus output tokens), or at its
        reserved amount when the response reports none (never less than it may have
        cost)."""
        if held is None or held.done:
            return
        used = int(getattr(usage, "input_tokens", 0) or 0) + \
            int(getattr(usage, "output_tokens", 0) or 0)
        await held.settle(used if used > 0 else None)


def _tokens(usage: Any, name: str) -> int | None:
    value = getattr(usage, name, None)
    return value if isinstance(value, int) else None


class QuotaModel(Model):
    """An SDK ``Model`` whose every request is reserved on the session's quota first (see
    the module); everything else is the wrapped model's (``model``, its name, included)."""

    def __init__(self, inner: Model, quota: RequestQuota) -> None:
        self.inner = inner
        self.quota = quota

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "quota") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"QuotaModel({self.inner!r})"

    async def get_response(self, system_instructions: str | None, input: Any,
                           model_settings: Any, tools: Any, output_schema: Any,
                           handoffs: Any, tracing: Any, **kwargs: Any) -> Any:
        """The wrapped model's response, reserved before and settled after."""
        held = await self.quota.hold(system_instructions, input, model_settings, tools,
                                     handoffs)
        with await self.quota.traced(self.inner, model_settings) as record:
            try:
                response = await self.inner.get_response(
                    system_instructions, input, model_settings, tools, output_schema,
                    handoffs, tracing, **kwargs)
            except BaseException:
                if held is not None:
                    await held.release()  # failed before its response: nothing counted
                raise
            usage = getattr(response, "usage", None)
            record.usage(_tokens(usage, "input_tokens"), _tokens(usage, "output_tokens"))
        await self.quota.settle(held, usage)
        return response

    async def stream_response(self, system_instructions: str | None, input: Any,
                              model_settings: Any, tools: Any, output_schema: Any,
                              handoffs: Any, tracing: Any,
                              **kwargs: Any) -> AsyncIterator[Any]:
        """The wrapped model's events, reserved before the request and settled at the
        final event's usage."""
        held = await self.quota.hold(system_instructions, input, model_settings, tools,
                                     handoffs)
        received = False
        # Not the current span: the stream yields to the caller with the span open.
        span = await self.quota.traced(self.inner, model_settings, current=False)
        try:
            with span as record:
                async for event in self.inner.stream_response(
                        system_instructions, input, model_settings, tools, output_schema,
                        handoffs, tracing, **kwargs):
                    received = True
                    response = getattr(event, "response", None)
                    if getattr(event, "type", None) in _TERMINAL and response is not None:
                        usage = getattr(response, "usage", None)
                        record.usage(_tokens(usage, "input_tokens"),
                                     _tokens(usage, "output_tokens"),
                                     getattr(response, "model", None))
                        await self.quota.settle(held, usage)
                    yield event
        finally:
            if held is not None and not held.done:
                # No final event: nothing arrived (released) or the stream broke off
                # mid-answer (counted as reserved: the provider may have billed it).
                await (held.settle() if received else held.release())

    def get_retry_advice(self, request: Any) -> Any:
        """The wrapped model's retry advice."""
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        """Close the wrapped model."""
        await self.inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.inner._cleanup_on_run_end(owner)


class QuotaProvider(ModelProvider):
    """A ``ModelProvider`` whose models are :class:`QuotaModel` over ``inner``'s."""

    def __init__(self, inner: ModelProvider, quota: RequestQuota) -> None:
        self.inner = inner
        self.quota = quota
        self._wrapped: dict[int, QuotaModel] = {}  # one wrapper per model the inner gives

    def get_model(self, model_name: str | None) -> Model:
        """``inner``'s model of that name, its requests reserved."""
        model = self.inner.get_model(model_name)
        if isinstance(model, QuotaModel):
            return model
        wrapped = self._wrapped.get(id(model))
        if wrapped is None or wrapped.inner is not model:
            wrapped = self._wrapped[id(model)] = QuotaModel(model, self.quota)
        return wrapped

    async def aclose(self) -> None:
        """Close ``inner``."""
        await self.inner.aclose()
