"""The user's own values in the model's text, at the model boundary (``restore_output``).

:class:`ChatkeepModel` wraps the model that serves each request of a run (the capability's
``get_wrapper_model``): what the model writes in the conversation's placeholders comes back
with the real values before Pydantic AI sees it, the way Pydantic AI itself removes the
joiners it put into chat-template tokens. So every copy Pydantic AI makes of the model's
text holds the real values: each streamed event, the first chunk of a part included (what
``run_stream`` shows from the response it accumulates), the response it accumulates and
keeps (``result.response``, ``all_messages()``), and the output. The provider's copy is what
it wrote; what goes back to it in the next request passes the session's egress again, so
it leaves in placeholders.

A streamed text part is restored with a :class:`~chatkeep.privacy.streaming.StreamRestorer`
per part: a chunk ending inside a placeholder is held back until the next chunk settles
it, and a snapshot of the response taken meanwhile leaves the held text out, so the
snapshot and the deltas that follow it never overlap. This rides on the hook Pydantic AI's
stream parts manager has for its own restorer (``special_token_restorer``), composed with
it: its restoring runs first, then the conversation's.

Only text is restored here. Thinking stays as written (a signed part cannot change); tool
calls' arguments are restored for the tool that runs them (``restore_tool_args``) and
output tools' for the output (``after_output_process``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

from pydantic_ai._parts_manager import ModelResponsePartsManager
from pydantic_ai._special_tokens import StreamRestorer as _PartsRestorer
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from chatkeep.privacy.streaming import StreamRestorer

Restore = Callable[[str], str]
#: The conversation's whole-text restore for a run's current request (``None``: the run
#: has no conversation, nothing to restore).
Restoring = Callable[[RunContext[Any] | None], Awaitable[Restore | None]]
#: Told each answer of the model as it arrives: a function giving the response so far.
Answered = Callable[[Callable[[], ModelResponse]], None]
_PartT = TypeVar("_PartT")

if "special_token_restorer" not in {f.name for f in dataclasses.fields(
        ModelResponsePartsManager)}:  # pragma: no cover - the extra pins a version with it
    raise ImportError("chatkeep.integrations.pydantic_ai needs Pydantic AI 2.78 or later "
                      "(its stream parts manager's restorer): pip install -U "
                      "'chatkeep[pydantic-ai]'")


def restored_response(response: ModelResponse, restore: Restore) -> ModelResponse:
    """``response`` with its text parts restored (a copy; the same object when none
    changes)."""
    parts = [dataclasses.replace(part, content=restore(part.content))
             if isinstance(part, TextPart) else part for part in response.parts]
    if all(new == old for new, old in zip(parts, response.parts, strict=True)):
        return response
    return dataclasses.replace(response, parts=parts)


class PlaceholderRestorer(_PartsRestorer):
    """A stream's text events and parts with the conversation's real values, after what
    ``inner`` (Pydantic AI's own restorer of the stream, if it has one) restores."""

    def __init__(self, restore: Restore, inner: _PartsRestorer | None = None) -> None:
        super().__init__()
        self._restore, self._inner = restore, inner
        self._texts: dict[int, StreamRestorer] = {}
        self._fed: set[int] = set()

    def restore(self, event: ModelResponseStreamEvent) -> ModelResponseStreamEvent:
        """``event`` as Pydantic AI and the application see it."""
        return self._own(self._inner.restore(event) if self._inner is not None else event)

    def _own(self, event: ModelResponseStreamEvent) -> ModelResponseStreamEvent:
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
            text = self._text(event.index).feed(event.part.content)
            return dataclasses.replace(event, part=dataclasses.replace(event.part,
                                                                       content=text))
        if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            text = self._text(event.index).feed(event.delta.content_delta)
            return dataclasses.replace(event, delta=dataclasses.replace(
                event.delta, content_delta=text))
        return event

    def _text(self, index: int) -> StreamRestorer:
        self._fed.add(index)
        found = self._texts.get(index)
        if found is None:
            found = self._texts[index] = StreamRestorer(self._restore)
        return found

    def flush_text(self) -> list[PartDeltaEvent]:
        """What the text parts hold, before another part starts (each part ends whole)."""
        events = [self._own(e) for e in (self._inner.flush_text() if self._inner else [])]
        fed, self._fed = self._fed, set()
        return [*_deltas(events), *self._flushed(sorted(fed))]

    def flush(self) -> list[PartDeltaEvent]:
        """What every part holds, at the end of the stream."""
        events = [self._own(e) for e in (self._inner.flush() if self._inner else [])]
        return [*_deltas(events), *self._flushed(sorted(self._texts))]

    def _flushed(self, indexes: list[int]) -> list[PartDeltaEvent]:
        out: list[PartDeltaEvent] = []
        for index in indexes:
            held = self._texts[index].flush()
            if held:
                out.append(PartDeltaEvent(index=index, delta=TextPartDelta(held)))
        return out

    def restore_part_so_far(self, index: int, part: _PartT) -> _PartT:
        """``part`` as the stream's events have delivered it so far: restored, without
        the text still held back (a later delta brings it)."""
        if self._inner is not None:
            part = self._inner.restore_part_so_far(index, part)
        if not isinstance(part, TextPart):
            return part
        restorer = self._texts.get(index)
        held = restorer.held if restorer is not None else ""
        content = part.content[:len(part.content) - len(held)] if held else part.content
        return cast(_PartT, dataclasses.replace(part, content=self._restore(content)))


def _deltas(events: list[ModelResponseStreamEvent]) -> list[PartDeltaEvent]:
    return [event for event in events if isinstance(event, PartDeltaEvent)]


class ChatkeepModel(WrapperModel):
    """``wrapped``, as a ``ChatkeepHistory`` run sends its requests through it: the
    model's text restored for the run's conversation before Pydantic AI sees it
    (non-streamed responses and every streamed event; ``restoring`` is ``None`` when
    ``restore_output`` is off), and each answer reported to ``answered`` (a function
    giving the response so far) the moment it arrives, for the quota's settle."""

    def __init__(self, wrapped: Any, restoring: Restoring | None,
                 run: RunContext[Any] | None = None,
                 answered: Answered | None = None) -> None:
        super().__init__(wrapped)
        self._restoring, self._run, self._answered = restoring, run, answered

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        """The wrapped model's response, its text restored."""
        response = await self.wrapped.request(messages, model_settings,
                                              model_request_parameters)
        if self._answered is not None:
            self._answered(lambda: response)
        restore = await self._restoring(self._run) if self._restoring is not None else None
        return response if restore is None else restored_response(response, restore)

    @asynccontextmanager
    async def request_stream(
            self, messages: list[ModelMessage], model_settings: ModelSettings | None,
            model_request_parameters: ModelRequestParameters,
            run_context: RunContext[Any] | None = None) -> AsyncGenerator[StreamedResponse]:
        """The wrapped model's stream, its text events and parts restored from the first
        chunk on."""
        async with self.wrapped.request_stream(messages, model_settings,
                                               model_request_parameters,
                                               run_context) as stream:
            if self._answered is not None:
                self._answered(stream.get)
            restore = await self._restoring(run_context or self._run) \
                if self._restoring is not None else None
            if restore is not None:
                manager = stream._parts_manager
                manager.special_token_restorer = PlaceholderRestorer(
                    restore, manager.special_token_restorer)
            yield stream
