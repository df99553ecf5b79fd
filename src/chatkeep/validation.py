"""Checks shared by every entry point: what the database would refuse is refused first.

PostgreSQL refuses a NUL character in text and JSON, a string longer than its
``VARCHAR(n)`` column, and an integer outside its ``INTEGER``/``BIGINT`` column; SQLite
stores all three without a word. A lone surrogate has no UTF-8 form at all (psycopg
cannot send it; SQLite would store it mangled). So the same value must fail the same
way on both backends, in Python, before anything is written, with a typed error that
names the field. The lengths below are the schema's (``store/schema.py``); a test
checks that they agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from chatkeep.errors import ChatkeepError, InvalidArgument

INT32_MAX = 2**31 - 1
"""Largest value of an ``INTEGER`` column on PostgreSQL (token counts, seq, limits)."""
INT64_MAX = 2**63 - 1
"""Largest value of a ``BIGINT`` column (totals), and of a JSON integer chatkeep keeps."""

REF_TYPE_MAX = 64
"""``*_type`` columns: a reference's type."""
REF_ID_MAX = 255
"""``*_id`` columns: a reference's id as text."""
TITLE_MAX = 255
"""``chat_sessions.title``."""
NAME_MAX = 255
"""``chat_messages.name``."""
TOOL_CALL_ID_MAX = 255
"""``chat_messages.tool_call_id`` and ``chat_tool_calls.call_id``."""
TOOL_NAME_MAX = 255
"""``chat_tool_calls.name``: a tool call's function name."""
MODEL_MAX = 255
"""``chat_usage.model``."""
SESSION_ID_MAX = 36
"""``chat_sessions.id``: a UUID."""
SESSION_KEY_MAX = 255
"""``chat_sessions.key``: the application's own name for a conversation."""
JSON_DEPTH_MAX = 64
"""Nesting deeper than this in metadata is refused (it is data, not a document store)."""


def text_problem(value: str) -> str | None:
    """What a database would refuse in ``value``: a NUL character or a lone surrogate
    (``None`` when the text is storable)."""
    if value.isascii():
        return "contains a NUL character" if "\x00" in value else None
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate (U+{ord(value[exc.start]):04X}), which is not text"
    return None


def check_text(value: object, field: str, *, error: type[ChatkeepError] = InvalidArgument,
               max_length: int | None = None, non_empty: bool = False) -> str:
    """``value`` as storable text: a ``str`` without NUL or lone surrogates, at most
    ``max_length`` characters, and not blank when ``non_empty``."""
    if not isinstance(value, str):
        raise error(f"{field} must be a string, got {type(value).__name__}")
    problem = text_problem(value)
    if problem:
        raise error(f"{field} {problem}")
    if max_length is not None and len(value) > max_length:
        raise error(f"{field} is longer than {max_length} characters ({len(value)})")
    if non_empty and not value.strip():
        raise error(f"{field} must not be empty")
    return value


def check_optional_text(value: object, field: str, *,
                        error: type[ChatkeepError] = InvalidArgument,
                        max_length: int | None = None) -> str | None:
    """``None``, or ``value`` checked by :func:`check_text`."""
    if value is None:
        return None
    return check_text(value, field, error=error, max_length=max_length)


def check_key(value: object) -> str:
    """An application's conversation key: non-blank text of at most 255 characters, without
    control characters (it is shown in logs and the CLI) or surrounding white space (two
    keys that print alike must be one key)."""
    key = check_text(value, "key", max_length=SESSION_KEY_MAX, non_empty=True)
    if key != key.strip():
        raise InvalidArgument(f"key must not start or end with white space: {key!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise InvalidArgument(f"key must not contain control characters: {key!r}")
    return key


def check_int(value: object, field: str, *, error: type[ChatkeepError] = InvalidArgument,
              minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """``value`` as an ``int`` (``bool`` is not one) within ``[minimum, maximum]``: the
    range of the column it goes to."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{field} must be an int, got {type(value).__name__}")
    if value < minimum:
        if minimum == 0:
            raise error(f"{field} must not be negative, got {_short(value)}")
        raise error(f"{field} must be at least {minimum}, got {_short(value)}")
    if value > maximum:
        raise error(f"{field} must be at most {maximum}, got {_short(value)}")
    return value


MAX_RETENTION_DAYS = 36_500
"""The longest retention a policy or a default may set (a century)."""


def check_retention_days(value: object, field: str) -> int | None:
    """A retention in days: ``None`` (kept) or an ``int`` in ``[0, MAX_RETENTION_DAYS]``
    (``InvalidArgument`` naming ``field`` otherwise): what ``keep.retention`` and the
    config's defaults take, checked where the config is read without loading it."""
    if value is None:
        return None
    return check_int(value, field, minimum=0, maximum=MAX_RETENTION_DAYS)


def check_bool(value: object, field: str, *,
               error: type[ChatkeepError] = InvalidArgument) -> bool:
    """``value`` if it is a real ``bool``: ``"no"`` or ``1`` is not a yes/no answer."""
    if not isinstance(value, bool):
        raise error(f"{field} must be True or False, got {value!r}"[:200])
    return value


def check_metadata(value: object, field: str = "metadata", *,
                   error: type[ChatkeepError] = InvalidArgument) -> dict[str, Any]:
    """``value`` (``None`` or a mapping) as a JSON object that round-trips: string keys,
    JSON values (``None``, ``bool``, 64-bit ``int``, finite ``float``, ``str``, lists,
    objects), no NUL or lone surrogate anywhere, at most ``JSON_DEPTH_MAX`` deep."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{field} must be a mapping (a JSON object), got {type(value).__name__}")
    if not value:
        return {}
    _check_json(value, field, error, 0)
    return dict(value)


def _check_json(value: object, where: str, error: type[ChatkeepError], depth: int) -> None:
    if depth > JSON_DEPTH_MAX:
        raise error(f"{where} is nested deeper than {JSON_DEPTH_MAX} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        problem = text_problem(value)
        if problem:
            raise error(f"{where} {problem}")
        return
    if isinstance(value, int):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise error(f"{where} is an integer outside 64 bits ({_short(value)})")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error(f"{where} is {value}, which JSON cannot hold")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise error(f"{where} has a key that is not a string: {key!r} "
                            f"({type(key).__name__}); JSON keys are strings"[:300])
            problem = text_problem(key)
            if problem:
                raise error(f"{where} has a key that {problem}")
            _check_json(item, f"{where}[{key[:40]!r}]", error, depth + 1)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]", error, depth + 1)
        return
    raise error(f"{where} holds a {type(value).__name__}, which is not JSON")


def _short(value: int) -> str:
    """A huge integer for a message (its digits can be thousands long)."""
    if value.bit_length() <= 128:
        return str(value)
    return f"an integer of {value.bit_length()} bits"
