"""Keyset paging: the opaque cursor a list page hands to the next one.

Lists page by keyset (the last row's sort key and id, never an offset), so the tenth
thousand page costs what the first does. The cursor packs that key; a damaged one simply
starts the list from the top.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

PAGE = 50
"""Rows per page of a list."""


def encode_cursor(*values: Any) -> str:
    """An opaque cursor for the row after which the next page starts."""
    data = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def decode_cursor(text: str | None) -> list[Any] | None:
    """The values :func:`encode_cursor` packed; ``None`` for a missing or damaged cursor
    (the list then starts from the top)."""
    if not text:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        return None
    return data if isinstance(data, list) else None
