"""Token counting behind a small protocol.

The default is the 4-characters-per-token heuristic: no dependency, no model
download, and close enough for budgeting. Plug ``tiktoken`` (or anything else)
by passing an object with a ``count(text) -> int`` method.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from chatkeep.errors import ConfigError


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that can estimate how many tokens a text costs."""

    def count(self, text: str) -> int:
        """Tokens for ``text`` (0 for the empty string)."""
        ...


class HeuristicCounter:
    """One token per started group of ``chars_per_token`` characters (default 4)."""

    def __init__(self, chars_per_token: int = 4) -> None:
        if chars_per_token <= 0:
            raise ConfigError("chars_per_token must be positive")
        self.chars_per_token = chars_per_token

    def count(self, text: str) -> int:
        """``ceil(len(text) / chars_per_token)``."""
        return -(-len(text) // self.chars_per_token)
