"""The attribute names chatkeep's telemetry uses, and the scope a call runs in.

Names follow the OpenTelemetry GenAI semantic conventions where they have one
(``gen_ai.*``: operation, provider, models, usage, the memory operations); what is chatkeep's
own sits under ``chatkeep.*`` (tenant, session id, purpose, what a history round did). No
value that came from a conversation is ever an attribute here: ids, counts, models and
names only (content is :mod:`chatkeep.observability.capture`'s, and only as it left).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chatkeep.refs import Ref

# -- the GenAI semantic conventions ------------------------------------------------------
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
OUTPUT_TYPE = "gen_ai.output.type"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOKEN_TYPE = "gen_ai.token.type"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_MESSAGES = "gen_ai.input.messages"
EMBEDDING_DIMENSIONS = "gen_ai.embeddings.dimension.count"
MEMORY_STORE_ID = "gen_ai.memory.store.id"
ERROR_TYPE = "error.type"

CHAT = "chat"
EMBEDDINGS = "embeddings"
UPDATE_MEMORY = "update_memory"
SEARCH_MEMORY = "search_memory"
"""The memory operation of a recall: the memories a round (or ``keep.memory.recall``)
found for a session's scopes."""
"""The memory operation of a fold (the summary) and of a distillation (memories): an
upsert, as the conventions define it."""

# -- chatkeep's own -----------------------------------------------------------------------
TENANT = "chatkeep.tenant"
SESSION_ID = "chatkeep.session.id"
PURPOSE = "chatkeep.purpose"
FORMAT = "chatkeep.history.format"
MESSAGES_IN = "chatkeep.history.messages_in"
MESSAGES_OUT = "chatkeep.history.messages_out"
TOKENS = "chatkeep.history.tokens"
BUDGET = "chatkeep.history.budget"
FOLDED = "chatkeep.history.folded"
SUMMARY_FAILED = "chatkeep.history.summary_failed"
OVER_BUDGET = "chatkeep.history.over_budget"
SUMMARY_VERSION = "chatkeep.summary.version"
WATERMARK = "chatkeep.summary.watermark"
RECALLED = "chatkeep.memory.recalled_ids"
REDACTIONS = "chatkeep.privacy.redactions"
FOLD_MESSAGES = "chatkeep.fold.messages"
FOLD_OUTCOME = "chatkeep.fold.outcome"
FOLD_CALLS = "chatkeep.fold.calls"
MEMORIES_ADDED = "chatkeep.memory.added"
MEMORY_IDS = "chatkeep.memory.ids"
MEMORIES_FOUND = "chatkeep.memory.found"
STORE_OPERATION = "chatkeep.store.operation"
FRAMEWORK = "chatkeep.framework"
"""Which framework made a model call chatkeep was in the path of (``openai_agents``,
``pydantic_ai``, ``langchain``)."""

STORE_SUMMARY = "chatkeep.summary"
"""``gen_ai.memory.store.id`` of a session's running summary (what a fold upserts)."""
STORE_MEMORIES = "chatkeep.memories"
"""``gen_ai.memory.store.id`` of the tenant's long-term memories (what distillation
upserts)."""


@functools.cache
def version() -> str:
    """chatkeep's version, the instrumentation scope's."""
    try:
        return importlib.metadata.version("chatkeep")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def tenant_label(tenant: Ref) -> str:
    """The tenant as one label, ``type:id`` (an application's own reference, never a
    conversation's content)."""
    return f"{tenant.type}:{tenant.id}"


@dataclass(frozen=True, slots=True)
class Scope:
    """Who a call is made for and why: a model call inherits it from the round, fold or
    distillation it runs in, so its spans and token metrics carry the tenant and purpose."""

    tenant: str | None = None
    session_id: str | None = None
    purpose: str = "chat"

    def attributes(self) -> dict[str, str]:
        """The scope as span attributes (the unset ones left out)."""
        out = {PURPOSE: self.purpose}
        if self.tenant is not None:
            out[TENANT] = self.tenant
        if self.session_id is not None:
            out[SESSION_ID] = self.session_id
        return out


_UNSCOPED = Scope()
_SCOPE: ContextVar[Scope | None] = ContextVar("chatkeep_otel_scope", default=None)


def current_scope() -> Scope:
    """The scope of the running code (the default: purpose ``chat``, no tenant)."""
    return _SCOPE.get() or _UNSCOPED


@contextlib.contextmanager
def scoped(tenant: Ref, session_id: str, purpose: str) -> Iterator[Scope]:
    """Run the block in a scope: ``purpose`` (``chat``, ``summary``, ``distil``) for
    ``session_id`` of ``tenant``."""
    token = _SCOPE.set(Scope(tenant_label(tenant), session_id, purpose))
    try:
        yield current_scope()
    finally:
        _SCOPE.reset(token)
