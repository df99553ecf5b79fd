"""Placeholder syntax and the escaping that keeps user-typed look-alikes inert.

A placeholder is ``<TYPE_N>`` (``<EMAIL_1>``). Text the user typed that already
has that shape must never come back from :func:`restore` as somebody's real
value, so redaction escapes it. A *placeholder-shaped token* is ``<``, any
number of backslashes, ``TYPE_N``, ``>``:

* :func:`escape` adds one backslash to every such token in user text
  (``<EMAIL_1>`` -> ``<\\EMAIL_1>``, ``<\\EMAIL_1>`` -> ``<\\\\EMAIL_1>``);
* restoring replaces a token with no backslash by its value when the vault
  knows it (else leaves it) and removes one backslash from every other token.

Escaping is injective, so ``restore(redact(text)) == text`` for any text, and a
token with a backslash is never looked up, whatever the model does with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["PLACEHOLDER_TOKEN_RE", "escape", "format_placeholder", "substitute_tokens"]

#: A placeholder-shaped token; group 1 is the backslashes, group 2 ``TYPE_N``.
PLACEHOLDER_TOKEN_RE = re.compile(r"<(\\*)([A-Z][A-Z0-9_]*_[0-9]+)>")


def format_placeholder(entity_type: str, number: int) -> str:
    """The placeholder for the ``number``-th distinct value of ``entity_type``."""
    return f"<{entity_type}_{number}>"


def escape(text: str) -> str:
    """Add one backslash to every placeholder-shaped token in ``text``."""
    if "<" not in text:
        return text
    return PLACEHOLDER_TOKEN_RE.sub(lambda m: f"<\\{m.group(1)}{m.group(2)}>", text)


def substitute_tokens(text: str, lookup: Callable[[str], str | None]) -> str:
    """Undo :func:`escape` and replace real placeholders in one pass.

    ``lookup`` receives an unescaped placeholder (``<EMAIL_1>``) and returns its
    value, or None to leave it as it is. Values are never rescanned.
    """
    if "<" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        slashes, body = match.group(1), match.group(2)
        if slashes:
            return f"<{slashes[1:]}{body}>"
        placeholder = match.group()
        value = lookup(placeholder)
        return placeholder if value is None else value

    return PLACEHOLDER_TOKEN_RE.sub(replace, text)
