"""IP addresses (validated by :mod:`ipaddress`) and URLs that carry ``user:password@``."""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Callable, Iterator

from chatkeep.privacy.base import Span

__all__ = ["IpAddressRecognizer", "UrlCredentialsRecognizer"]

# Not preceded by a word char or dot (so "v1.2.3.4" and "1.2.3.4.5" stay out).
_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3}(?!\.?\d|\w)")
# A run of hex digits, colons and dots with at least two colons, not glued to a word.
# Possessive runs (*+) never give characters back: one pass over the run per attempt.
# (The greedy form "[...]*:[...]*" backtracked quadratically: "1:"*25000 took 17 s.)
_IPV6 = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{0,4}:(?=[0-9A-Fa-f.]*+:)[0-9A-Fa-f:.]*+(?![\w:])")
# The longest IPv6 text: eight groups of four, or six and an IPv4 address (45 chars).
_MAX_IPV6 = 45
# "version 3.2.1.4", "build 10.0.0.1": a version number shaped like an IPv4 address.
_VERSION_BEFORE = re.compile(
    r"(?i)(?<![^\W\d_])(?:version|versi[óo]n|ver|vers|build|release|firmware|rev|revision"
    r"|update|patch|v)[ \t]*[:.]?[ \t]*$"
)
# scheme://user:password@host... The password may hold "/", "#" or "?" (people paste
# unencoded ones), unless it starts like a port and a path ("host:8443/@alice" is a
# profile URL, not a password). User and password are bounded (128 characters), so
# a text full of "://" costs a bounded amount of work per occurrence.
_URL_CREDENTIALS = re.compile(
    r"(?<![\w+.\-])[A-Za-z][A-Za-z0-9+.\-]{1,20}://"
    r"[^\s:/?#@\"'<>]{0,128}:(?!\d{1,5}(?:[/?#]|$))[^\s@\"'<>]{1,128}@"
    r"[^\s\"'<>]+"
)
_TRAILING_PUNCTUATION = ".,;:!?)]}'\""
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
# Where the first separator of an address can be: a dot right after a digit ...
_IPV4_ANCHOR = re.compile(r"\.(?<=\d\.)")
# ... and for IPv6, a colon with a second colon after it, only hex digits and dots between.
_IPV6_ANCHOR = re.compile(r":(?=[0-9A-Fa-f.]*+:)")
# What each address pattern's lookbehind refuses before its first character.
_IPV4_BLOCKING = re.compile(r"[\w.]*+")
_IPV6_BLOCKING = re.compile(r"[\w:.]*+")
# A scheme is 2-21 characters, so a match starts at most 21 characters before its "://".
_MAX_SCHEME = 21
_SCHEME_CHARS = frozenset(string.ascii_letters + string.digits + "+.-")


class IpAddressRecognizer:
    """Finds IPv4 and IPv6 addresses that :mod:`ipaddress` accepts.

    IPv4 must be four dotted numbers 0-255 without leading zeros, not inside a
    longer dotted run nor right after a version word ("version 3.2.1.4"). IPv6
    needs at least two colons and a digit, which keeps clock times
    (``10:30:00``), MAC addresses and ``Foo::bar`` out.
    """

    entity_types: tuple[str, ...] = ("IP_ADDRESS",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every IP address in ``text``."""
        if "." in text:
            for match in _anchored_matches(
                _IPV4, text, _IPV4_ANCHOR, str.isdecimal, 3, _IPV4_BLOCKING
            ):
                value = match.group()
                if _ipv4_valid(value) and not _VERSION_BEFORE.search(
                    text, max(0, match.start() - 12), match.start()
                ):
                    yield Span(match.start(), match.end(), "IP_ADDRESS", value, canonical=value)
        if "::" in text or text.count(":") >= 7:
            for match in _anchored_matches(
                _IPV6, text, _IPV6_ANCHOR, _HEX_DIGITS.__contains__, 4, _IPV6_BLOCKING
            ):
                value = match.group()
                if len(value) > _MAX_IPV6 + 2 or not any(c.isdigit() for c in value):
                    continue
                # A sentence may end right after the address: "blocked 2001:db8::1."
                yield from _ipv6_span(value, match.start(), value.rstrip(".:"))


def _ipv4_valid(value: str) -> bool:
    """What ``ipaddress.IPv4Address`` accepts of four dotted 1-3 digit groups.

    ASCII digits, each group 0-255 without a leading zero; the dotted value is
    then its own compressed form.
    """
    return value.isascii() and all(
        int(group) <= 255 and (group[0] != "0" or group == "0") for group in value.split(".")
    )


def _anchored_matches(
    pattern: re.Pattern[str],
    text: str,
    anchor: re.Pattern[str],
    head: Callable[[str], bool],
    size: int,
    blocking: re.Pattern[str] | None = None,
) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text)``, trying only where a match can start.

    For a pattern whose matches begin with at most ``size`` characters ``head``
    accepts, then a character ``anchor`` finds, and are never preceded by such
    a character (as "192." in an IPv4 address or "2001:" in an IPv6 one): the
    start of that run before each anchor is the one place to try, so the regex
    engine runs a few times instead of at every digit.

    ``blocking`` matches (from a failed start) the run of characters the
    pattern's lookbehind refuses to follow; no match starts inside it, so the
    scan resumes after it: one attempt per run, however many anchors it holds.
    """
    resume = 0
    found = anchor.search(text)
    while found is not None:
        at = found.start()
        start, limit = at, max(resume, at - size)
        while start > limit and head(text[start - 1]):
            start -= 1
        match = pattern.match(text, start)
        if match is None:
            after = at + 1
            if blocking is not None:
                run = blocking.match(text, start)
                after = max(after, run.end() + 1 if run is not None else after)
            found = anchor.search(text, after)
            continue
        yield match
        resume = match.end()
        found = anchor.search(text, resume)


def _ipv6_span(value: str, start: int, fallback: str) -> Iterator[Span]:
    """Yield ``value`` (or else ``fallback``) as a span if it is a valid IPv6 address."""
    for candidate in (value, fallback) if fallback != value else (value,):
        # Without "::" an address spells out all eight groups (the last two maybe as an
        # IPv4 address), so six colons at least: skip the costly failed parse of "10:30:00".
        if "::" not in candidate and candidate.count(":") < 6:
            continue
        try:
            address = ipaddress.IPv6Address(candidate)
        except ValueError:
            continue
        end = start + len(candidate)
        yield Span(start, end, "IP_ADDRESS", candidate, canonical=address.compressed)
        return


class UrlCredentialsRecognizer:
    """Finds URLs with an embedded ``user:password@`` (``postgres://app:s3cret@db:5432/x``).

    The whole URL is the span, minus trailing sentence punctuation, so the host
    and path the secret unlocks are hidden too. The user may be empty
    (``redis://:pass@host``) and the password may hold ``/``, ``#`` or ``?``
    as pasted (``mongodb://app:Xy/9#k@host``); ``scheme://user@host`` without a
    password, and ``https://host:8443/@alice`` (a port, then a path), are not reported.
    """

    entity_types: tuple[str, ...] = ("URL_CREDENTIALS",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every credential-bearing URL in ``text``."""
        resume = 0
        separator = text.find("://")
        while separator != -1:
            # ":" and "/" end a scheme, so a match has its scheme right before this "://",
            # and starts where that run of scheme characters starts (the lookbehind
            # refuses any later start): one attempt per "://".
            start, limit = separator, max(resume, separator - _MAX_SCHEME)
            while start > limit and text[start - 1] in _SCHEME_CHARS:
                start -= 1
            match = _URL_CREDENTIALS.match(text, start) if start < separator - 1 else None
            if match is None:
                separator = text.find("://", separator + 1)
                continue
            resume = match.end()
            separator = text.find("://", resume)
            value = match.group().rstrip(_TRAILING_PUNCTUATION)
            if "@" not in value.split("://", 1)[1]:
                continue
            yield Span(match.start(), match.start() + len(value), "URL_CREDENTIALS", value)
