"""Language-model access: the ``ChatModel`` protocol and an OpenAI-compatible client.

The names load on first use (:mod:`chatkeep._exports`): importing ``chatkeep.llm.base``
or ``chatkeep.llm.openai_client`` does not import the guard (``adapt``) and through it the
privacy layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatkeep._exports import lazy_exports

if TYPE_CHECKING:
    from chatkeep.llm.adapt import as_chat_model as as_chat_model
    from chatkeep.llm.base import ChatModel as ChatModel
    from chatkeep.llm.base import Completion as Completion
    from chatkeep.llm.openai_client import OpenAIChatModel as OpenAIChatModel
    from chatkeep.llm.openai_client import model_from_config as model_from_config

#: Each public name, under the module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "chatkeep.llm.adapt": ("as_chat_model",),
    "chatkeep.llm.base": ("ChatModel", "Completion"),
    "chatkeep.llm.openai_client": ("OpenAIChatModel", "model_from_config"),
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
