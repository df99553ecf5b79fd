"""``ChatkeepHistory``: the capability that sends chatkeep's history with every model request.

Before each model request of a run, the request's messages are replaced (the run's own
history is left as it is): the messages the store loaded give way to chatkeep's budgeted
history of the stored conversation (pinned system prompts, the running summary as a
``CompactionPart``, closed turns as their text, the open turn exactly as recorded), and
the messages the run added follow unchanged. The instructions and every text of the
request go out through the session's egress, so with redaction on no detected value
reaches the model, the run's new prompt included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext

from chatkeep.errors import InvalidArgument, SessionNotFound
from chatkeep.integrations.context import named_party
from chatkeep.integrations.pydantic_ai._request import PreparedRequest
from chatkeep.integrations.pydantic_ai.store import ChatkeepConversationStore
from chatkeep.refs import Ref

Tenant = Ref | Callable[[RunContext[Any]], Ref | None] | None

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

    Load the conversation with the store (``await store.for_run(id)``: the record and
    the newest messages; or ``store.load(id)``) and pass it to the run: the messages the
    store handed out are the ones chatkeep's history replaces.
    """

    store: ChatkeepConversationStore
    tenant: Tenant = None
    on_request: Callable[[PreparedRequest], None] | None = None

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
        prepared = await self.store.prepare_request(tenant, key, own,
                                                    [part.content for part in parts])
        if self.on_request is not None:
            self.on_request(prepared)
        if parts:
            parameters = dataclasses.replace(parameters, instruction_parts=[
                part if part.content == text else dataclasses.replace(part, content=text)
                for part, text in zip(parts, prepared.instructions, strict=True)])
        return dataclasses.replace(request_context, messages=prepared.messages,
                                   model_request_parameters=parameters)

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


def _named_tenant(ctx: RunContext[Any]) -> Ref | None:
    """The tenant a run names in its ``deps`` or ``metadata``, if it names one."""
    for source in (ctx.deps, ctx.metadata):
        tenant = named_party(source, "tenant")
        if tenant is not None:
            return tenant
    return None
