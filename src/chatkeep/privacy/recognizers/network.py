"""IP addresses (validated by :mod:`ipaddress`) and URLs that carry ``user:password@``."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from chatkeep.privacy.base import Span

__all__ = ["IpAddressRecognizer", "UrlCredentialsRecognizer"]

# Not preceded by a word char or dot (so "v1.2.3.4" and "1.2.3.4.5" stay out).
_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3}(?!\.?\d|\w)")
_IPV6 = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?![\w:])")
_URL_CREDENTIALS = re.compile(
    r"(?<![\w+.\-])[A-Za-z][A-Za-z0-9+.\-]{1,20}://"
    r"[^\s:/?#@\"'<>]*:[^\s/?#@\"'<>]+@"
    r"[^\s\"'<>]+"
)
_TRAILING_PUNCTUATION = ".,;:!?)]}'\""


class IpAddressRecognizer:
    """Finds IPv4 and IPv6 addresses that :mod:`ipaddress` accepts.

    IPv4 must be four dotted numbers 0-255 without leading zeros, not inside a
    longer dotted run. IPv6 needs at least two colons and a digit, which keeps
    clock times (``10:30:00``), MAC addresses and ``Foo::bar`` out.
    """

    entity_types: tuple[str, ...] = ("IP_ADDRESS",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every IP address in ``text``."""
        if "." in text:
            for match in _IPV4.finditer(text):
                yield from _ip_span(match.group(), match.start())
        if "::" in text or text.count(":") >= 7:
            for match in _IPV6.finditer(text):
                value = match.group()
                if value.count(":") < 2 or not any(c.isdigit() for c in value):
                    continue
                # A sentence may end right after the address: "blocked 2001:db8::1."
                yield from _ip_span(value, match.start(), value.rstrip(".:"))


def _ip_span(value: str, start: int, fallback: str | None = None) -> Iterator[Span]:
    """Yield ``value`` (or else ``fallback``) as a span if it is a valid address."""
    for candidate in (value, fallback):
        if not candidate:
            continue
        try:
            address = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        end = start + len(candidate)
        yield Span(start, end, "IP_ADDRESS", candidate, canonical=address.compressed)
        return


class UrlCredentialsRecognizer:
    """Finds URLs with an embedded ``user:password@`` (``postgres://app:s3cret@db:5432/x``).

    The whole URL is the span, minus trailing sentence punctuation, so the host
    and path the secret unlocks are hidden too. The user may be empty
    (``redis://:pass@host``); ``scheme://user@host`` without a password is not reported.
    """

    entity_types: tuple[str, ...] = ("URL_CREDENTIALS",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every credential-bearing URL in ``text``."""
        if "://" not in text:
            return
        for match in _URL_CREDENTIALS.finditer(text):
            value = match.group().rstrip(_TRAILING_PUNCTUATION)
            if "@" not in value.split("://", 1)[1]:
                continue
            yield Span(match.start(), match.start() + len(value), "URL_CREDENTIALS", value)
