"""``ChatkeepHistory``: the capability that sends chatkeep's history with every model request.

Before each model request of a run, the request's messages are replaced (the run's own
history is left as it is): the messages the store loaded give way to chatkeep's budgeted
history of the stored conversation (pinned system prompts, the running summary as a
``CompactionPart``, closed turns as their text, the open turn exactly as recorded), and
the messages the run added follow unchanged. The instructions and every string of the
request (files' URLs and text-like files' text included) go out through the session's
egress, the run's new input read with the message it answers, so with redaction on no
detected value reaches the model.

What the application shows gets the user's own values back (``restore_output``, on by
default): the run's output, and the text deltas of every streamed response
(``run_stream``, ``run_stream_events``, ``iter`` with ``node.stream``), a placeholder
split across deltas restored whole. The messages Pydantic AI keeps (``all_messages``,
``result.response``, the stored exact record) and the provider's copy stay as the model
wrote them, in placeholders.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.output import OutputContext
from pydantic_ai.tools import RunContext

from chatkeep.errors import InvalidArgument, SessionNotFound
from chatkeep.integrations.context import named_party
from chatkeep.integrations.pydantic_ai import _files
from chatkeep.integrations.pydantic_ai._request import PreparedRequest
from chatkeep.integrations.pydantic_ai.store import ChatkeepConversationStore
from chatkeep.privacy.streaming import StreamRestorer
from chatkeep.refs import Ref

Tenant = Ref | Callable[[RunContext[Any]], Ref | None] | None
#: Restores kept for runs' current steps (one mapping read per model request).
_RESTORES_KEPT = 256

__all__ = ["ChatkeepHistory"]


@dataclasses.dataclass
class ChatkeepHistory(AbstractCapability[Any]):
    """Send chatkeep's budgeted, redacted history of the run's conversation.

    ``store``: the store the run's conversation is loaded from and saved to. The run's
    ``conversation_id`` names the conversation; its tenant is ``tenant`` (a ``Ref``, or a
    function of the ``RunContext``), else what the run names (``deps`` or ``metadata``
    holding ``chatkeep_tenant`` or ``tenant``: a ``Ref`` or ``"type:id"``), else the
    store's. A run naming another tenant than a fixed one finds nothing
    (``SessionNotFound``). ``on_request`` is called with each request as prepared (its
    estimate and budget: for logs and tests). ``restore_output``: the run's output and
    streamed text deltas carry the user's real values instead of placeholders (what the
    application shows; the messages Pydantic AI keeps stay in placeholders).

    Load the conversation with the store (``await store.for_run(id)``: the record and
    the newest messages; or ``store.load(id)``) and pass it to the run: the messages the
    store handed out are the ones chatkeep's history replaces.
    """

    store: ChatkeepConversationStore
    tenant: Tenant = None
    on_request: Callable[[PreparedRequest], None] | None = None
    restore_output: bool = True
    _restores: OrderedDict[tuple[str | None, int, str], Callable[[str], str]] = \
        dataclasses.field(default_factory=OrderedDict, init=False, repr=False, compare=False)

    async def before_model_request(self, ctx: RunContext[Any],
                                   request_context: ModelRequestContext) -> ModelRequestContext:
        """The request with chatkeep's history in place of the stored messages."""
        key = ctx.conversation_id
        if not key:
            raise InvalidArgument("ChatkeepHistory needs the run's conversation_id: run the "
                                  "agent with conversation=... (from the store)")
        tenant = self.tenant_of(ctx)
        own = [m for m in request_context.messages if not self.store.holds(m)]
        parameters = request_context.model_request_parameters
        parts = list(parameters.instruction_parts or ())
        texts = [part.content for part in parts]
        prepared = await self.store.prepare_request(tenant, key, own, texts)
        if prepared.unread:  # text-like files by URL: read, so their text is scrubbed too
            files = await _files.read_texts(prepared.unread)
            prepared = await self.store.prepare_request(tenant, key, own, texts, files)
        if self.on_request is not None:
            self.on_request(prepared)
        if parts:
            parameters = dataclasses.replace(parameters, instruction_parts=[
                part if part.content == text else dataclasses.replace(part, content=text)
                for part, text in zip(parts, prepared.instructions, strict=True)])
        return dataclasses.replace(request_context, messages=prepared.messages,
                                   model_request_parameters=parameters)

    async def after_output_process(self, ctx: RunContext[Any], *,
                                   output_context: OutputContext, output: Any) -> Any:
        """The run's output with the user's real values (``restore_output``)."""
        if not self.restore_output or not ctx.conversation_id:
            return output
        if isinstance(output, str):  # streamed text output is validated at every step
            return (await self.restoring(ctx))(output)
        return await self.store.restore(ctx.conversation_id, output, scope=self.tenant_of(ctx))

    async def restoring(self, ctx: RunContext[Any]) -> Callable[[str], str]:
        """The conversation's whole-text restore for the run's current step, its mapping
        read once per model request (what that request's response can name)."""
        key = (ctx.run_id, ctx.run_step, ctx.conversation_id or "")
        found = self._restores.get(key)
        if found is None:
            found = self._restores[key] = await self.store.restoring(
                key[2], scope=self.tenant_of(ctx))
            while len(self._restores) > _RESTORES_KEPT:
                self._restores.popitem(last=False)
        return found

    @property
    def has_wrap_run_event_stream(self) -> bool:
        """``False``: restoring streamed text must not turn a plain ``run`` into a
        streamed one (Pydantic AI streams every run whose capabilities claim this)."""
        return False

    async def wrap_run_event_stream(
            self, ctx: RunContext[Any], *,
            stream: AsyncIterable[AgentStreamEvent]) -> AsyncIterable[AgentStreamEvent]:
        """A streamed response's text events with the user's real values
        (``restore_output``); the run's accumulated response is not changed."""
        if not self.restore_output or not ctx.conversation_id:
            async for event in stream:
                yield event
            return
        restoring = _TextRestoring(self, ctx)
        async for event in stream:
            async for out in restoring.events(event):
                yield out
        for out in restoring.flush():
            yield out

    def tenant_of(self, ctx: RunContext[Any]) -> Ref:
        """The tenant of the run's conversation (see the class docstring)."""
        named = _named_tenant(ctx)
        fixed = self.tenant(ctx) if callable(self.tenant) else self.tenant
        if fixed is not None:
            fixed = Ref.coerce(fixed)
            if named is not None and named != fixed:
                raise SessionNotFound(f"no conversation {ctx.conversation_id!r} for tenant "
                                      f"{named}")
            return fixed
        return named if named is not None else self.store.tenant_for()

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not spec-serializable: it holds a store."""
        return None


class _TextRestoring:
    """The text events of one streamed response, restored part by part: each text part
    has its own :class:`StreamRestorer`, so a placeholder split across its deltas comes
    back whole; what a restorer still holds goes out before the part's end. A placeholder
    cut by the end of a part's first text (the event that starts the part) stays as the
    model wrote it: ``run_stream`` has shown that text unrestored already."""

    def __init__(self, history: ChatkeepHistory, ctx: RunContext[Any]) -> None:
        self.history, self.ctx = history, ctx
        self.parts: dict[int, StreamRestorer] = {}
        self._restore: Callable[[str], str] | None = None

    async def restore(self) -> Callable[[str], str]:
        """The conversation's restore, its mapping read once (the request was sent)."""
        if self._restore is None:
            self._restore = await self.history.restoring(self.ctx)
        return self._restore

    async def events(self, event: AgentStreamEvent) -> AsyncIterator[AgentStreamEvent]:
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
            for held in self.flush(event.index):
                yield held
            # The part's first text is restored as it stands, nothing held back: run_stream
            # shows the consumer that text from the response it accumulates (in
            # placeholders), not from this event, and later deltas must continue it.
            restore = await self.restore()
            self.parts[event.index] = StreamRestorer(restore)
            yield dataclasses.replace(event, part=dataclasses.replace(
                event.part, content=restore(event.part.content)))
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta) \
                and event.index in self.parts:
            text = self.parts[event.index].feed(event.delta.content_delta)
            if text:
                yield dataclasses.replace(event, delta=dataclasses.replace(
                    event.delta, content_delta=text))
        elif isinstance(event, PartEndEvent) and isinstance(event.part, TextPart) \
                and event.index in self.parts:
            for held in self.flush(event.index):
                yield held
            whole = (await self.restore())(event.part.content)
            yield dataclasses.replace(event, part=dataclasses.replace(event.part,
                                                                      content=whole))
        else:
            yield event

    def flush(self, index: int | None = None) -> list[AgentStreamEvent]:
        """A delta with what the restorer of part ``index`` (every part: ``None``) holds."""
        out: list[AgentStreamEvent] = []
        for at in [index] if index is not None else sorted(self.parts):
            restorer = self.parts.pop(at, None) if at is not None else None
            if restorer is not None and (held := restorer.flush()):
                out.append(PartDeltaEvent(index=at, delta=TextPartDelta(held)))
        return out


def _named_tenant(ctx: RunContext[Any]) -> Ref | None:
    """The tenant a run names in its ``deps`` or ``metadata``, if it names one."""
    for source in (ctx.deps, ctx.metadata):
        tenant = named_party(source, "tenant")
        if tenant is not None:
            return tenant
    return None
