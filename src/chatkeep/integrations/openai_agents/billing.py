"""Run hooks that bill each model call of an Agents SDK run to a chatkeep session.

The model's own usage figures are billed as they are. A call that reports none (a
streamed Chat Completions call without ``stream_options.include_usage``, which the SDK
asks for only from api.openai.com unless ``ModelSettings(include_usage=True)``, or a
provider that sends no usage) would bill zero tokens: it is billed with the keep's token
counter (the one the budget uses) over the request and the response instead, a warning
is logged, and the ledger line's model carries :data:`ESTIMATED` (``"gpt-x (estimated)"``)
so reports can tell the estimate from the provider's count.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from chatkeep.messages import Usage

if TYPE_CHECKING:
    from agents import RunHooks

    from chatkeep.aio import AsyncChatSession
    from chatkeep.tokens import TokenCounter

log = logging.getLogger("chatkeep.integrations.openai_agents")

#: What an estimated ledger line's model ends with.
ESTIMATED = " (estimated)"

__all__ = ["ESTIMATED", "billing_hooks"]


def billing_hooks(conversation: Callable[[], Awaitable[AsyncChatSession]],
                  counter: Callable[[], Awaitable[TokenCounter]]) -> RunHooks[Any]:
    """SDK run hooks billing every model call under purpose ``chat`` to the session
    ``conversation()`` returns, estimated with ``counter()`` where the call reports no
    usage."""
    from agents import RunHooks

    class _Billing(RunHooks[Any]):
        def __init__(self) -> None:
            self._asked: dict[int, str] = {}

        async def on_llm_start(self, context: Any, agent: Any, system_prompt: str | None,
                               input_items: list[Any]) -> None:
            # Kept per agent: the request text an estimate counts (one call per agent
            # at a time; agents run as tools are other agents).
            self._asked[id(agent)] = json.dumps([system_prompt or "", _plain(input_items)],
                                                ensure_ascii=False, default=str)

        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            asked = self._asked.pop(id(agent), "")
            model = _model_name(agent)
            usage = getattr(response, "usage", None)
            prompt = int(getattr(usage, "input_tokens", 0) or 0)
            completion = int(getattr(usage, "output_tokens", 0) or 0)
            if prompt == 0 and completion == 0:
                count = (await counter()).count
                answer = json.dumps(_plain(getattr(response, "output", None) or []),
                                    ensure_ascii=False, default=str)
                prompt, completion = count(asked), count(answer)
                log.warning("a model call of agent %r reported no usage (a streamed call "
                            "without include_usage?): billed %d + %d estimated tokens",
                            getattr(agent, "name", "?"), prompt, completion)
                model = f"{(model or 'unknown')[:255 - len(ESTIMATED)]}{ESTIMATED}"
            session = await conversation()
            await session.record_usage("chat", Usage(prompt, completion), model)

    return _Billing()


def _model_name(agent: Any) -> str | None:
    """The model an agent names (a model object's ``model``, or the name itself)."""
    model = getattr(agent, "model", None)
    if isinstance(model, str):
        return model
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else None


def _plain(items: Any) -> Any:
    """SDK items as plain JSON-like values."""
    if isinstance(items, list):
        return [_plain(item) for item in items]
    dump = getattr(items, "model_dump", None)
    return dump(exclude_unset=True) if callable(dump) else items
