"""Language-model access: the ``ChatModel`` protocol and an OpenAI-compatible client."""

from chatkeep.llm.adapt import as_chat_model
from chatkeep.llm.base import ChatModel, Completion
from chatkeep.llm.openai_client import OpenAIChatModel, model_from_config

__all__ = ["ChatModel", "Completion", "OpenAIChatModel", "as_chat_model", "model_from_config"]
