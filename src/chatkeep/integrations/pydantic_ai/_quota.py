"""A run's model requests on the tenant's quota (issue 33): each request is reserved
before it is sent, then settled to the usage its response reports, or released when it
fails before a response. Functions of the sync core (the async keep runs them on its
bridge), and the values they read from the request (no I/O).

A reservation holds the request's input, as the budget's counter counts it (chatkeep's
history, the run's own messages, the instructions and the tools' definitions), plus its
output ceiling: the request's ``max_tokens`` model setting (the run's, the agent's or the
model's), else ``quotas.output_ceiling``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import ModelRequestContext

from chatkeep.app import Chatkeep
from chatkeep.integrations.pydantic_ai import _storage
from chatkeep.integrations.pydantic_ai._storage import Place
from chatkeep.quotas import Reservation


def ceiling_of(request_context: ModelRequestContext) -> int | None:
    """The output ceiling the request names (``max_tokens`` in its model settings, else
    in its model's), or ``None``."""
    for settings in (request_context.model_settings, _model_settings(request_context.model)):
        value = settings.get("max_tokens") if isinstance(settings, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _model_settings(model: Any) -> Any:
    try:
        return model.settings
    except (AttributeError, NotImplementedError):  # pragma: no cover - a bare Model
        return None


def tools_text(request_context: ModelRequestContext) -> str:
    """The definitions of the request's tools (function and output) as the provider is
    sent them: names, descriptions and JSON schemas, to count as input."""
    parameters = request_context.model_request_parameters
    tools = [*parameters.function_tools, *parameters.output_tools]
    if not tools:
        return ""
    return json.dumps([{"name": tool.name, "description": tool.description,
                        "parameters": tool.parameters_json_schema} for tool in tools],
                      ensure_ascii=False, default=str)


def used_of(response: ModelResponse) -> int | None:
    """The tokens a response reports (input plus output), or ``None`` when it reports
    none (the reservation then counts at its reserved amount)."""
    usage = response.usage
    used = usage.input_tokens + usage.output_tokens
    return used if used > 0 else None


def reserve(core: Chatkeep, place: Place, key: str, request_tokens: int, tools: str,
            ceiling: int | None) -> Reservation:
    """Reserve one model request of conversation ``key`` on its tenant's quota (and its
    actor's): ``QuotaExceeded`` when it does not fit, with nothing written."""
    session = _storage.open_session(core, place, key)
    tokens = request_tokens + (core.counter.count(tools) if tools else 0)
    tokens += ceiling or core.config.quotas.output_ceiling
    quotas = core.quotas
    if quotas.remaining(session.tenant, actor=session.actor) is None:
        # No quota applies (a read, where a reservation is a write transaction): a
        # reservation holding nothing, as reserve() returns then.
        return Reservation(None, tokens, session.tenant, session.actor, purpose="chat",
                           session_id=session.id, settler=None)
    return quotas.reserve(session.tenant, tokens, actor=session.actor,
                          session_id=session.id, purpose="chat")


def settle(core: Chatkeep, held: Reservation, used: int | None) -> None:
    """Settle ``held`` at ``used`` (``None``: its reserved amount)."""
    held.settle(used)


def release(core: Chatkeep, held: Reservation) -> None:
    """Give ``held`` back: its request failed before a response."""
    held.release()
