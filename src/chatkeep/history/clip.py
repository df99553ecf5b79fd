"""Clip one oversized text head and tail, with a visible marker, to a token cap.

Used on the outgoing copy only (a stored message is never edited): one 5M-token paste
or tool result must not block a session, and the model should see that something
was cut and roughly how much.
"""

from __future__ import annotations

from collections.abc import Callable

from chatkeep.privacy.escaping import PLACEHOLDER_TOKEN_RE
from chatkeep.tokens import TokenCounter

MARKER = "\n[... {tokens} tokens clipped by chatkeep ...]\n"
_SNAP_CHARS = 80  # how far to look for whitespace so words are not cut in half
#: Texts up to this many characters are redacted whole before they are clipped; a longer
#: one is first cut to its head and tail with this margin to spare on each side, so the
#: redaction cost stays bounded and the final clip falls inside the margin (a value cut at
#: the window's edge lies in the part the final clip throws away).
REDACT_WHOLE_CHARS = 1_000_000
WINDOW_MARGIN_CHARS = 65_536


def redact_then_clip(text: str, max_tokens: int, counter: TokenCounter,
                     redact: Callable[..., str], context: str | None = None
                     ) -> tuple[str, bool]:
    """``text`` redacted, then clipped to ``max_tokens``: redaction sees every value whole
    (clipping first cuts a card number or a name in two and leaves a part raw), and the
    clip never splits a placeholder."""
    keep = max_tokens * 8 + WINDOW_MARGIN_CHARS
    if len(text) > max(REDACT_WHOLE_CHARS, 3 * keep) and counter.count(text) > max_tokens:
        text = text[:keep] + MARKER.format(tokens=counter.count(text[keep:-keep])) \
            + text[-keep:]
    redacted = redact(text, context) if context else redact(text)
    return clip(redacted, max_tokens, counter)


def clip(text: str, max_tokens: int, counter: TokenCounter) -> tuple[str, bool]:
    """``text`` itself when it fits ``max_tokens``, else its head and tail around a marker
    saying how many tokens were left out; the flag tells whether it was clipped."""
    total = counter.count(text)
    if total <= max_tokens:
        return text, False
    chars_per_token = max(1.0, len(text) / max(1, total))
    keep = int(max_tokens * chars_per_token) - len(MARKER.format(tokens=total))
    for _ in range(8):  # shrink until the pluggable counter agrees
        if keep <= 0:
            break
        head_end = _snap(text, keep * 2 // 3, forward=False)
        tail_start = _snap(text, len(text) - (keep - head_end), forward=True)
        clipped = text[:head_end].rstrip() + MARKER.format(
            tokens=counter.count(text[head_end:tail_start])) + text[tail_start:].lstrip()
        if counter.count(clipped) <= max_tokens:
            return clipped, True
        keep = int(keep * 0.9)
    marker = MARKER.format(tokens=total).strip()
    return (marker if counter.count(marker) <= max_tokens else ""), True


def _snap(text: str, index: int, *, forward: bool) -> int:
    """Move ``index`` to a nearby whitespace boundary (within ``_SNAP_CHARS``), and never
    inside a placeholder (``<EMAIL_1>`` stays whole or goes whole)."""
    index = max(0, min(len(text), index))
    window = (text[index:index + _SNAP_CHARS] if forward
              else text[max(0, index - _SNAP_CHARS):index])
    spaces = [i for i, ch in enumerate(window) if ch.isspace()]
    if spaces:
        index = index + spaces[0] if forward else index - (len(window) - spaces[-1])
    return _outside_placeholder(text, index, forward=forward)


def _outside_placeholder(text: str, index: int, *, forward: bool) -> int:
    """``index``, or the edge of the placeholder-shaped token it falls inside."""
    start = text.rfind("<", max(0, index - 64), index)
    if start < 0:
        return index
    match = PLACEHOLDER_TOKEN_RE.match(text, start)
    if match is None or not match.start() < index < match.end():
        return index
    return match.end() if forward else match.start()
