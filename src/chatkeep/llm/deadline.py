"""A total deadline for one model or embedding call, retries included.

The SDK's ``timeout`` bounds each read, not the call: an endpoint that trickles one byte
every half second keeps a call alive indefinitely, and its retries sleep on top. So
chatkeep drives the official SDK itself: each attempt runs with the SDK's own retries off
and the time that is left as its timeout, the body is read chunk by chunk against the
deadline, and retries (connection errors, timeouts, 408/409/429/5xx) happen only while
time remains. A call ends at most one read after its deadline (a silent read waits no
longer than the time left when the attempt started).

Only public SDK API is used (``with_options``, ``with_streaming_response``), so a client
the application built keeps its own HTTP settings. An object that is merely shaped like
the SDK is called as it is, without a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any, TypeVar

from chatkeep.errors import ModelError

T = TypeVar("T")

RETRY_STATUSES = frozenset({408, 409, 429})
"""Statuses worth another attempt besides 5xx (the SDK's own choice)."""
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0


class Deadline:
    """The end of one call, on the monotonic clock."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds

    def remaining(self) -> float:
        """Seconds left (never negative)."""
        return max(0.0, self._end - self._clock())

    def check(self, what: str) -> None:
        """``ModelError`` once the deadline has passed."""
        if self.remaining() <= 0:
            raise ModelError(f"{what}: no complete reply within the {self.seconds:g} s "
                             "deadline (llm.timeout)")


def total_timeout(client: Any, default: float) -> float:
    """The deadline of a call through ``client``: its own ``timeout`` when it has a number
    (the SDK's ``openai.OpenAI(timeout=...)``), else ``default``."""
    timeout = getattr(client, "timeout", None)
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        return float(timeout)
    read = getattr(timeout, "read", None)  # an httpx.Timeout
    return float(read) if isinstance(read, int | float) and read > 0 else default


def retries_of(client: Any, default: int) -> int:
    """The attempts after the first that ``client`` was configured for."""
    retries = getattr(client, "max_retries", None)
    return retries if isinstance(retries, int) and retries >= 0 else default


def supports_deadline(client: Any) -> bool:
    """Whether ``client`` is the official SDK (it can be driven attempt by attempt)."""
    return callable(getattr(client, "with_options", None))


def parse_body(body: bytes, what: str) -> Any:
    """A JSON reply read as attributes (as the SDK's models are read by chatkeep)."""
    try:
        return json.loads(body, object_hook=lambda fields: SimpleNamespace(**fields))
    except ValueError as exc:
        raise ModelError(f"{what}: the reply is not JSON") from exc


def sdk_error() -> type[Exception]:
    """The SDK's base error (imported when a call is made: a client exists by then)."""
    import openai

    return openai.OpenAIError


def _retryable(exc: Exception) -> bool:
    import openai

    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in RETRY_STATUSES or status >= 500)


def _backoff(attempt: int) -> float:
    return min(FIRST_BACKOFF * 2.0 ** attempt, MAX_BACKOFF)


def _pause_or_raise(exc: Exception, tries: int, retries: int, deadline: Deadline,
                    what: str) -> float:
    """The pause before the next attempt after ``exc``; ``ModelError`` when there is none
    (out of retries, not worth retrying, or no time left for the pause)."""
    pause = _backoff(tries)
    if tries >= retries or not _retryable(exc) or deadline.remaining() <= pause:
        raise ModelError(f"{what}: {type(exc).__name__}: {exc}") from exc
    return pause


def read_within(chunks: Iterator[bytes], deadline: Deadline, what: str) -> bytes:
    """The whole body, refusing it once the deadline has passed between two chunks."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        deadline.check(what)
    return bytes(body)


async def aread_within(chunks: AsyncIterator[bytes], deadline: Deadline, what: str) -> bytes:
    """Async twin of :func:`read_within`."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        deadline.check(what)
    return bytes(body)


def call_within(attempt: Callable[[float], bytes], deadline: Deadline, retries: int,
                what: str) -> Any:
    """``attempt(time_left)`` until it returns a body, retrying while time remains; the
    parsed reply, or ``ModelError``."""
    tries = 0
    while True:
        deadline.check(what)
        try:
            return parse_body(attempt(deadline.remaining()), what)
        except sdk_error() as exc:
            time.sleep(_pause_or_raise(exc, tries, retries, deadline, what))
        tries += 1


async def acall_within(attempt: Callable[[float], Awaitable[bytes]], deadline: Deadline,
                       retries: int, what: str) -> Any:
    """Async twin of :func:`call_within`; each attempt is also cancelled at the deadline."""
    tries = 0
    while True:
        deadline.check(what)
        try:
            async with asyncio.timeout(deadline.remaining()):
                body = await attempt(deadline.remaining())
            return parse_body(body, what)
        except TimeoutError:
            deadline.check(what)
            raise  # a timeout of the caller's own, not ours
        except sdk_error() as exc:
            await asyncio.sleep(_pause_or_raise(exc, tries, retries, deadline, what))
        tries += 1


def post_within(client: Any, endpoint: Callable[[Any], Any], kwargs: dict[str, Any],
                timeout: float, retries: int, what: str) -> Any:
    """One SDK request (``endpoint(client)`` is e.g. ``c.chat.completions``) within a total
    deadline of ``timeout`` seconds; the parsed JSON reply."""
    deadline = Deadline(timeout)

    def attempt(left: float) -> bytes:
        bounded = client.with_options(timeout=left, max_retries=0)
        with endpoint(bounded).with_streaming_response.create(**kwargs) as raw:
            return read_within(raw.iter_bytes(), deadline, what)

    return call_within(attempt, deadline, retries, what)


async def apost_within(client: Any, endpoint: Callable[[Any], Any], kwargs: dict[str, Any],
                       timeout: float, retries: int, what: str) -> Any:
    """Async twin of :func:`post_within`."""
    deadline = Deadline(timeout)

    async def attempt(left: float) -> bytes:
        bounded = client.with_options(timeout=left, max_retries=0)
        async with endpoint(bounded).with_streaming_response.create(**kwargs) as raw:
            return await aread_within(raw.iter_bytes(), deadline, what)

    return await acall_within(attempt, deadline, retries, what)
