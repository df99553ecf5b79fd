"""What a run of a :class:`ChatkeepSession` changes beyond the SDK's defaults.

Each is a plain function over the SDK's values, so ``session.run*`` only wire them in:

* :class:`RunState`: what one run knows that the SDK's call data does not (its new input,
  and the message that input answers: the session's newest assistant text), so the
  input filter can read the new input with its context, as ``build_history`` reads every
  stored message with the one before it.
* :func:`chained_run_config`: the ``RunConfig`` a run gets: the session's input filter after
  the caller's own; on a redacting session no content in traces
  (``trace_include_sensitive_data=False``); streamed usage asked for
  (``ModelSettings(include_usage=True)``) unless the caller refused it; the models it
  names or provides reserving every request on the tenant's quota (:mod:`.reserving`).
* :func:`guarded_agent`: the starting agent with its input guardrails fed scrubbed input.
* :func:`restore_final_output` and :func:`restored_events`: the user's own values put back
  into what the app shows (``final_output``, streamed text deltas).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents import Agent, RunConfig
    from agents.guardrail import InputGuardrail
    from agents.run_config import CallModelData, ModelInputData

    from chatkeep.integrations.openai_agents.reserving import RequestQuota
    from chatkeep.privacy.streaming import StreamRestorer

log = logging.getLogger("chatkeep.integrations.openai_agents")

#: Scrubs a JSON-like payload; ``context``: the message its new input answers.
Scrub = Callable[[Any, "str | None"], Awaitable[Any]]

__all__ = ["RunState", "as_dict", "chained_run_config", "current_run", "done", "guarded_agent",
           "new_input_items", "newest_answer", "reserve_unwrapped", "restore_final_output",
           "restored_events", "running", "scrub_with_context", "scrubbed_guardrail"]


@dataclass
class RunState:
    """One run of a session: its new input as the SDK sends it (plain dicts), and the
    message that input answers (set when the SDK first reads the history)."""

    new_input: list[Any] = field(default_factory=list)
    context: str | None = None
    read: bool = False


#: The runs of the sessions whose filter the running code installed, by session object id.
_RUNS: ContextVar[Mapping[int, RunState] | None] = ContextVar("chatkeep_agents_runs",
                                                              default=None)


def running(owner: object, state: RunState) -> Any:
    """Mark ``owner``'s filter as installed for the code (and tasks) run from here; returns
    the token to pass to :func:`done`."""
    return _RUNS.set({**(_RUNS.get() or {}), id(owner): state})


def done(token: Any) -> None:
    """Undo :func:`running`."""
    _RUNS.reset(token)


def current_run(owner: object) -> RunState | None:
    """The run of ``owner`` the running code is part of (``None``: outside its ``run*``)."""
    return (_RUNS.get() or {}).get(id(owner))


def new_input_items(value: Any) -> list[Any]:
    """A run's ``input`` as the plain dict items the SDK sends (a text is one user
    message)."""
    if isinstance(value, str):
        return [{"content": value, "role": "user"}]
    if isinstance(value, list):
        return [as_dict(item) for item in value]
    return []


def as_dict(item: Any) -> Any:
    """An input item as a plain dict (the SDK may hand pydantic models)."""
    dump = getattr(item, "model_dump", None)
    return dump(exclude_unset=True) if callable(dump) else item


def newest_answer(items: list[Any]) -> str | None:
    """The text of the newest assistant message among history ``items`` (what a new input
    answers), or ``None``."""
    for item in reversed(items):
        if not isinstance(item, Mapping) or item.get("role") != "assistant":
            continue
        content = item.get("content")
        if isinstance(content, str):
            return content or None
        if isinstance(content, list):
            text = " ".join(part.get("text", "") for part in content
                            if isinstance(part, Mapping) and isinstance(part.get("text"), str))
            return text or None
    return None


async def scrub_with_context(scrub: Scrub, payload: Any, new_input: list[Any],
                             context: str | None) -> Any:
    """``payload`` (a request body ``{"instructions", "input"}``, an input list or a text)
    scrubbed; the run's new input in it is first read with ``context``, the message it
    answers, so a value only its question identifies (a bare number after "your social
    security number?") is found. The rest is read without it: a context also tells what a
    short reply is not, and it is not the context of older messages or tool outputs."""
    if context:
        if isinstance(payload, str):
            payload = await scrub(payload, context)
        else:
            items = payload.get("input") if isinstance(payload, dict) else payload
            if isinstance(items, list):
                marked = [i for i, item in enumerate(items) if item in new_input]
                if marked:
                    answered = await scrub([items[i] for i in marked], context)
                    items = list(items)
                    for i, item in zip(marked, answered, strict=True):
                        items[i] = item
                    payload = {**payload, "input": items} if isinstance(payload, dict) \
                        else items
    return await scrub(payload, None)


def chained_run_config(base: RunConfig | Mapping[str, Any] | None,
                       egress: Callable[[ModelInputData], Awaitable[ModelInputData]],
                       scrub_guardrail_input: Callable[[Any], Awaitable[Any]], *,
                       redacting: bool, quota: RequestQuota | None = None) -> RunConfig:
    """``base`` (or a default ``RunConfig``) with ``egress`` chained after its own input
    filter, its input guardrails fed scrubbed input, streamed usage asked for, and, when
    the session may redact, ``trace_include_sensitive_data=False``. With ``quota``, the
    models it names or provides reserve every request (:mod:`.reserving`), and a request
    of an agent whose model object no run of the session wrapped (an agent run as a tool
    holds its own) is reserved by the filter and counted at its reserved amount."""
    from agents import ModelSettings, RunConfig

    config = base if isinstance(base, RunConfig) else RunConfig(**dict(base or {}))
    own = config.call_model_input_filter
    unwrapped = _unwrapped_models(config, quota)

    async def through_egress(data: CallModelData[Any]) -> ModelInputData:
        if own is not None:
            updated = own(data)
            model_data = await updated if inspect.isawaitable(updated) else updated
            data = dataclasses.replace(data, model_data=model_data)
        sent = await egress(data.model_data)
        if quota is not None and unwrapped(data.agent):
            await reserve_unwrapped(quota, data.agent, sent, config.model_settings)
        return sent

    settings = config.model_settings or ModelSettings()
    if settings.include_usage is None:
        settings = dataclasses.replace(settings, include_usage=True)
    elif not settings.include_usage:
        log.warning("include_usage=False: streamed model calls report no usage, so "
                    "billing_hooks() bill them with estimated token counts (model "
                    "marked %r)", "(estimated)")
    changes: dict[str, Any] = {
        "call_model_input_filter": through_egress, "model_settings": settings,
        "input_guardrails": [scrubbed_guardrail(g, scrub_guardrail_input)
                             for g in config.input_guardrails or []] or None}
    if quota is not None:
        changes.update(_reserving_models(config, quota))
    if redacting:
        # Spans carry tool outputs and model input before the filter sees them, and the
        # exporter runs on its own thread, so no egress can stand in between: traces keep
        # their structure (agents, tools, handoffs, guardrails, usage), not the content.
        changes["trace_include_sensitive_data"] = False
    return dataclasses.replace(config, **changes)


def _reserving_models(config: RunConfig, quota: RequestQuota) -> dict[str, Any]:
    """The ``RunConfig`` changes that reserve every request of the models ``config``
    names (``model``) or provides (``model_provider``)."""
    from agents.models.interface import Model

    from chatkeep.integrations.openai_agents.reserving import QuotaModel, QuotaProvider

    changes: dict[str, Any] = {}
    if not isinstance(config.model_provider, QuotaProvider):
        changes["model_provider"] = QuotaProvider(config.model_provider, quota)
    if isinstance(config.model, Model) and not isinstance(config.model, QuotaModel):
        changes["model"] = QuotaModel(config.model, quota)
    return changes


def _unwrapped_models(config: RunConfig,
                      quota: RequestQuota | None) -> Callable[[Any], bool]:
    """Whether an agent's requests under ``config`` go to a model object no reservation
    wraps (neither ``config.model`` nor the provider answers for it)."""
    if quota is None or config.model is not None:
        return lambda agent: False
    from agents.models.interface import Model

    from chatkeep.integrations.openai_agents.reserving import QuotaModel

    def unwrapped(agent: Any) -> bool:
        model = getattr(agent, "model", None)
        return isinstance(model, Model) and not isinstance(model, QuotaModel)

    return unwrapped


async def reserve_unwrapped(quota: RequestQuota, agent: Any, sent: ModelInputData,
                            run_settings: Any) -> None:
    """Reserve a request whose response no wrapper sees (``QuotaExceeded``: not sent) and
    count it at its reserved amount."""
    settings = getattr(agent, "model_settings", None)
    if settings is not None and run_settings is not None:
        settings = settings.resolve(run_settings)
    held = await quota.hold(sent.instructions, sent.input, settings or run_settings)
    if held is None:
        return  # no quota applies
    log.info("a model request of agent %r goes to a model object chatkeep did not wrap "
             "(an agent run as a tool?): counted at its reserved %d tokens",
             getattr(agent, "name", "?"), held.tokens)
    await held.settle()


def scrubbed_guardrail(guardrail: InputGuardrail[Any],
                       scrub_input: Callable[[Any], Awaitable[Any]]) -> InputGuardrail[Any]:
    """``guardrail`` handed the run's input scrubbed (its own model call, written the SDK's
    documented way with ``Runner.run(guardrail_agent, input)``, sends only that)."""
    if getattr(guardrail.guardrail_function, "_chatkeep_scrubbed", False):
        return guardrail
    original = guardrail.guardrail_function

    async def scrubbed(context: Any, agent: Any, input: Any) -> Any:
        result = original(context, agent, await scrub_input(input))
        return await result if inspect.isawaitable(result) else result

    scrubbed._chatkeep_scrubbed = True  # type: ignore[attr-defined]
    return dataclasses.replace(guardrail, guardrail_function=scrubbed,
                               name=guardrail.get_name())


def guarded_agent(agent: Agent[Any],
                  scrub_input: Callable[[Any], Awaitable[Any]]) -> Agent[Any]:
    """``agent``, or a clone of it whose input guardrails get scrubbed input (the SDK runs
    the starting agent's input guardrails on the run's input before any filter)."""
    guardrails = list(getattr(agent, "input_guardrails", None) or [])
    if not guardrails:
        return agent
    return agent.clone(input_guardrails=[scrubbed_guardrail(g, scrub_input)
                                         for g in guardrails])


async def restore_final_output(value: Any, restore_text: Callable[[str], Awaitable[str]],
                               restore_payload: Callable[[Any], Awaitable[Any]]) -> Any:
    """A run's ``final_output`` with the user's own values back: a text, a JSON-like value,
    or a pydantic model (validated again from its restored dump); anything else as is."""
    if isinstance(value, str):
        return await restore_text(value)
    if isinstance(value, dict | list):
        return await restore_payload(value)
    dump = getattr(value, "model_dump", None)
    validate = getattr(type(value), "model_validate", None)
    if callable(dump) and callable(validate):
        return validate(await restore_payload(dump(mode="json")))
    return value


_DELTA = "response.output_text.delta"
_TEXT_DONE = "response.output_text.done"
#: Events that end a text: what the restorer still holds is released before them.
_TEXT_ENDS = frozenset({_TEXT_DONE, "response.content_part.done", "response.output_item.done",
                        "response.completed", "response.incomplete", "response.failed"})


async def restored_events(events: AsyncIterator[Any],
                          new_restorer: Callable[[], Awaitable[StreamRestorer]]
                          ) -> AsyncIterator[Any]:
    """The SDK's stream events with the text deltas restored: a placeholder split across
    deltas comes out whole (its head held back, released with the delta that ends it);
    what is still held when a text ends is released as one more delta before the event
    that ends it (a Responses ``output_text.done`` carries its full text restored too).
    A restorer is made per model response, after that request was scrubbed, so it knows
    every placeholder the model was shown."""
    restorer: StreamRestorer | None = None
    last: Any = None
    async for event in events:
        data: Any = getattr(event, "data", None)
        kind = getattr(data, "type", None) if event.type == "raw_response_event" else None
        if kind == _DELTA:
            if restorer is None:
                restorer = await new_restorer()
            last = event
            yield _with(event, delta=restorer.feed(data.delta))
            continue
        if kind in _TEXT_ENDS:
            if restorer is not None:
                held = restorer.flush()
                if held and last is not None:
                    yield _with(last, delta=held)
                restorer = None
            if kind == _TEXT_DONE:
                fresh = await new_restorer()
                yield _with(event, text=fresh.feed(data.text) + fresh.flush())
                continue
        yield event
    if restorer is not None:
        held = restorer.flush()
        if held and last is not None:
            yield _with(last, delta=held)


def _with(event: Any, **changes: str) -> Any:
    """A copy of a raw response ``event`` whose data has ``changes``."""
    return dataclasses.replace(event, data=event.data.model_copy(update=changes))
