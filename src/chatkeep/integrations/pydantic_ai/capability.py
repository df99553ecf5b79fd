"""``ChatkeepHistory``: the capability that sends chatkeep's history with every model request.

Before each model request of a run, the request's messages are replaced (the run's own
history is left as it is): the messages the store loaded give way to chatkeep's budgeted
history of the stored conversation (pinned system prompts, the running summary as a
``CompactionPart``, closed turns as their text, the open turn exactly as recorded), and
the messages the run added follow unchanged. The instructions and every string of the
request (files' URLs and text-like files' text included) go out through the session's
egress, the run's new input read with the message it answers, so with redaction on no
detected value reaches the model.

Each model request is reserved on the tenant's quota before it is sent (its input and
its output ceiling: ``QuotaExceeded`` and nothing sent when it does not fit), settled to
the usage its response reports (a streamed one when the stream ends) and released when
it fails before a response (:mod:`._quota`).

The user gets their own values back (``restore_output``, on by default): the model's text
is restored at the model boundary (:mod:`._restoring`), before Pydantic AI sees it, so
every streamed event from a part's first chunk on, the messages Pydantic AI keeps and the
output carry the real values; structured output is restored as the run outputs it. A
function tool receives its arguments restored (``restore_tool_args``, on by default);
what it returns goes to the model through the egress like everything else. The
provider's copy stays as the model wrote it, in placeholders.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import anyio
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import RawToolArgs
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.output import OutputContext
from pydantic_ai.tools import RunContext, ToolDefinition

from chatkeep.errors import InvalidArgument, PrivacyError, SessionNotFound
from chatkeep.integrations.context import named_party
from chatkeep.integrations.pydantic_ai import _files, _quota
from chatkeep.integrations.pydantic_ai._request import PreparedRequest
from chatkeep.integrations.pydantic_ai._restoring import ChatkeepModel, Restore
from chatkeep.integrations.pydantic_ai.store import ChatkeepConversationStore
from chatkeep.integrations.pydantic_ai.store import _unchanged as unchanged
from chatkeep.quotas import Reservation
from chatkeep.refs import Ref

Tenant = Ref | Callable[[RunContext[Any]], Ref | None] | None
#: Restores kept for runs' current steps (one mapping read per model request).
_RESTORES_KEPT = 256
#: Tools the agent runs itself: function tools, and those that need approval first.
_FUNCTION_KINDS = frozenset({"function", "unapproved"})


class _Held:
    """The reservation of the model request a ``wrap_model_request`` call wraps; the
    model's answer once one arrived (a function giving the response so far); whether the
    model call failed (an error before any response)."""

    reservation: Reservation | None = None
    answer: Callable[[], ModelResponse] | None = None
    failed: bool = False

    def answered(self, answer: Callable[[], ModelResponse]) -> None:
        self.answer = answer


#: Set by ``wrap_model_request`` around its handler, which runs ``before_model_request``.
_HELD: ContextVar[_Held | None] = ContextVar("chatkeep_pydantic_ai_held", default=None)

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
    estimate and budget: for logs and tests).

    ``restore_output``: the model's text comes back with the user's real values where it
    wrote placeholders, before Pydantic AI sees it (every streamed event from a part's
    first chunk on, the messages it keeps, the output), and so does structured output;
    ``False`` leaves all of it as the model wrote it. ``restore_tool_args``: a function
    tool receives its arguments with the real values (``False``: as the model wrote
    them). Only on a session that redacts; the provider's copy stays in placeholders.

    Every model request is reserved on the tenant's quota before it is sent and settled to
    its response's usage (``QuotaExceeded``, nothing sent, when it does not fit).

    Load the conversation with the store (``await store.for_run(id)``: the record and
    the newest messages; or ``store.load(id)``) and pass it to the run: the messages the
    store handed out are the ones chatkeep's history replaces.
    """

    store: ChatkeepConversationStore
    tenant: Tenant = None
    on_request: Callable[[PreparedRequest], None] | None = None
    restore_output: bool = True
    restore_tool_args: bool = True
    _run: RunContext[Any] | None = dataclasses.field(default=None, init=False, repr=False,
                                                     compare=False)
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
        if prepared.redacting and getattr(ctx, "trace_include_content", False):
            raise _traced_content()  # content turned on after the run started
        await self._reserve(tenant, key, prepared, request_context)
        if parts:
            parameters = dataclasses.replace(parameters, instruction_parts=[
                part if part.content == text else dataclasses.replace(part, content=text)
                for part, text in zip(parts, prepared.instructions, strict=True)])
        return dataclasses.replace(request_context, messages=prepared.messages,
                                   model_request_parameters=parameters)

    async def _reserve(self, tenant: Ref, key: str, prepared: PreparedRequest,
                       request_context: ModelRequestContext) -> None:
        """Reserve the request on the tenant's quota, for ``wrap_model_request`` to settle
        (without one around it, the reservation's lease ends it at its reserved amount)."""
        held = await self.store.reserve(tenant, key, prepared.request_tokens,
                                        _quota.tools_text(request_context),
                                        _quota.ceiling_of(request_context))
        slot = _HELD.get()
        if slot is not None:
            if slot.reservation is not None:  # the step prepared again: one request goes out
                await self.store.release(slot.reservation)
            slot.reservation = held

    async def wrap_model_request(
            self, ctx: RunContext[Any], *, request_context: ModelRequestContext,
            handler: Callable[[ModelRequestContext], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """The request, reserved on the tenant's quota by ``before_model_request``; its
        reservation settled to the response's usage (a streamed response's when the
        stream has ended), or ended as :meth:`_ended` says when the request raised."""
        slot = _Held()
        token = _HELD.set(slot)
        try:
            response = await handler(request_context)
        except BaseException as exc:
            if slot.reservation is not None:
                with anyio.CancelScope(shield=True):
                    await self._ended(slot, slot.reservation, exc)
            raise
        finally:
            _HELD.reset(token)
        if slot.reservation is not None:
            used = _quota.used_of(response)
            if used is None and slot.failed:  # a response recovered from a failed call
                await self.store.release(slot.reservation)
            else:
                await self.store.settle(slot.reservation, used)
        return response

    async def _ended(self, slot: _Held, held: Reservation, error: BaseException) -> None:
        """End the reservation of a request whose handler raised ``error``: settled to
        what the model answered (a hook raised after its response; a stream the
        application stopped reading: its usage so far, else the reserved amount),
        released when the model never answered (a failed call, an error before sending),
        counted at the reserved amount when cancelled while waiting (the provider may be
        billing it)."""
        if slot.answer is not None:
            await self.store.settle(held, _quota.used_of(slot.answer()))
        elif slot.failed or isinstance(error, Exception):
            await self.store.release(held)
        else:
            await self.store.settle(held, None)

    async def on_model_request_error(self, ctx: RunContext[Any], *,
                                     request_context: ModelRequestContext,
                                     error: Exception) -> ModelResponse:
        """Note that the model call failed before a response (its reservation is then
        released, even when the error reaches ``wrap_model_request`` as a cancellation,
        as a streamed request's does), and raise it on."""
        slot = _HELD.get()
        if slot is not None:
            slot.failed = True
        raise error

    async def for_run(self, ctx: RunContext[Any]) -> ChatkeepHistory:
        """This capability for one run: it knows the run (for the model it wraps). A run
        whose instrumentation records content on a conversation that redacts is refused
        here, before its prompt joins the messages the run's span records."""
        if getattr(ctx, "trace_include_content", False) and ctx.conversation_id and \
                await self.store.may_redact(ctx.conversation_id, scope=self.tenant_of(ctx)):
            raise _traced_content()
        run = copy.copy(self)
        run._run = ctx
        return run

    def get_wrapper_model(self, model: Model) -> Model | None:
        """The model as the run's requests go through it: its text restored for the
        run's conversation (``restore_output``), its answers noted for the quota."""
        slot = _HELD.get()
        return ChatkeepModel(model, self._model_restore if self.restore_output else None,
                             self._run, slot.answered if slot is not None else None)

    async def _model_restore(self, run: RunContext[Any] | None) -> Restore | None:
        """The conversation's restore for the run's request now being sent, its mapping
        read as it stands (the request's own values included)."""
        if run is None or not run.conversation_id:
            return None
        restore = await self.store.restoring(run.conversation_id, scope=self.tenant_of(run))
        return None if restore is unchanged else restore  # a session that does not redact

    async def before_tool_validate(self, ctx: RunContext[Any], *, call: ToolCallPart,
                                   tool_def: ToolDefinition,
                                   args: RawToolArgs) -> RawToolArgs:
        """A function tool's arguments with the real values (``restore_tool_args``): what
        it validates and runs with, also once approved (a call awaiting approval keeps
        the args it was validated with). The call in the messages keeps the model's."""
        if not self.restore_tool_args or tool_def.kind not in _FUNCTION_KINDS \
                or not ctx.conversation_id:
            return args
        data: Any = args
        if isinstance(args, str):
            try:
                data = json.loads(args) if args.strip() else {}
            except ValueError:
                return args  # not JSON: validation asks the model again
        if not isinstance(data, dict):
            return args
        back = await self.store.restore(ctx.conversation_id, data, scope=self.tenant_of(ctx))
        return args if back == data else back

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


def _traced_content() -> PrivacyError:
    return PrivacyError(
        "this run's Pydantic AI instrumentation records content "
        "(InstrumentationSettings(include_content=True), its default) and the conversation "
        "redacts: its traces would carry the user's raw values. Instrument with "
        "InstrumentationSettings(include_content=False); nothing was sent")


def _named_tenant(ctx: RunContext[Any]) -> Ref | None:
    """The tenant a run names in its ``deps`` or ``metadata``, if it names one."""
    for source in (ctx.deps, ctx.metadata):
        tenant = named_party(source, "tenant")
        if tenant is not None:
            return tenant
    return None
