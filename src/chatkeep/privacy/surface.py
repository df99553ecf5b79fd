"""A normalised view of a text, with a map back to the original offsets.

A value the vault holds can reappear in another *surface form*: JSON-escaped in a tool
result (``Garc\\u00eda``), percent-encoded in a URL (``ana.garcia%40example.com``), as
HTML character references (``ana.garcia&#64;example.com``, ``Garc&iacute;a``) or with
markup inside (``Ana <b>García</b>``), in another case or without its accents
(``ANA GARCIA``), in fullwidth characters (``５３６-２２-１２３４``), with a look-alike letter of
another script (Greek ``Α`` for ``A``), or encoded whole as base64, base64url (a JWT's
payload) or hex. Matching each form separately would multiply the patterns; instead
the text is read once into a view where all of those forms are the same string, and each
vault entry is matched there once (see :mod:`chatkeep.privacy.known_values`).

The view decodes ``%XX`` sequences (UTF-8; an invalid sequence stays as written), then JSON
escapes (``\\uXXXX`` with surrogate pairs, ``\\n``, ``\\"``, ``\\/``...; any run of
backslashes counts as one, so doubly escaped JSON reads the same), then HTML character
references (numeric, and the named ones of HTML5 written with their ``;``), then drops the
tags of HTML's own elements (``<b>``, ``</span>``, ``<br/>``: not ``<at>`` nor a
placeholder), again while that decoded a ``%``, a backslash, a ``&`` or a ``<`` (a value
encoded twice over: ``%2540``, ``\\u005cu00e9``, ``&amp;#64;``), then maps each character
on its own: NFKC, case folding, accents dropped (NFD without combining marks, then NFC),
invisible format characters (soft hyphen, zero-width space) dropped, every decimal digit to
its ASCII digit, every dash to ``-``, every apostrophe to ``'``, and a Greek or Cyrillic
letter that looks like a Latin one to that letter (:data:`HOMOGLYPHS`).

Base64, base64url and hex cannot be decoded in place: a card number or a word is valid
base64 too, and decoding it would hide it from its own pattern. So each run of the
decoded text that decodes (as base64, base64url, hex or ``\\xNN`` escapes) to printable
UTF-8 is read into a view of its own, a *segment* (:attr:`SurfaceView.segments`), and a
value found there redacts the whole run (the encoded text holds no smaller slice of it).
A segment's own runs are read once more (base64 inside a JWT inside base64), no deeper.
Each step records where its rewritten characters came from, so a match in the view maps
back to the exact slice of the original.

Cost: this runs on every outgoing text whose session knows some value, so the common case
is kept cheap: an ASCII text with nothing to decode is only lower-cased (its offsets are
the original's); otherwise each step costs one C-level pass plus work per rewritten
character, and offsets are kept as a sparse list of the rewritten pieces only. Encoded
runs are found in one more pass; a run that is a plain lower-case word is not tried, and
each tried run is decoded once, so the whole stays linear.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import html.entities
import re
import unicodedata
from bisect import bisect_right
from dataclasses import dataclass

__all__ = ["HOMOGLYPHS", "SEGMENT_DEPTH", "Segment", "SurfaceView", "cased_form", "normalize",
           "surface_view"]

#: A run of ``%XX`` bytes (decoded together: one character may take several bytes).
_PERCENT_RUN = re.compile(r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*")
#: A JSON escape. The lookbehind, placed after the first backslash so the regex engine can
#: search for the backslash first, makes each run of backslashes start one match at most
#: (so a long run cannot make the search quadratic).
_JSON_ESCAPE = re.compile(
    r"\\(?<!\\[\s\S])\\*(?:"
    r"u([dD][89abAB][0-9a-fA-F]{2})\\+u([dD][c-fC-F][0-9a-fA-F]{2})"  # surrogate pair
    r"|u([0-9a-fA-F]{4})"
    r"|([/\"\\bfnrt]))"
)
#: An HTML character reference: decimal, hexadecimal, or named (HTML5's names, with ``;``).
_HTML_REFERENCE = re.compile(
    r"&(?:#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6})|([A-Za-z][A-Za-z0-9]{1,31}));?")
#: The tags of HTML's own elements (so ``<at>``, ``a<b and c>d`` and placeholders stay).
_HTML_TAG = re.compile(
    r"</?(a|abbr|b|bdi|bdo|big|blockquote|br|center|cite|code|dd|del|dfn|div|dl|dt|em"
    r"|font|h[1-6]|i|img|ins|kbd|label|li|mark|ol|p|pre|q|s|samp|small|span|strike"
    r"|strong|sub|sup|table|tbody|td|th|thead|time|tr|tt|u|ul|var|wbr)"
    r"(?=[\s/>])[^<>]{0,2000}>", re.IGNORECASE)
#: Elements that break a line: their tags read as a space (``Ana<br>García``), the others'
#: as nothing (``Gar<b>cía</b>``).
_BLOCK_TAGS = frozenset({"blockquote", "br", "center", "dd", "div", "dl", "dt", "h1", "h2",
                         "h3", "h4", "h5", "h6", "li", "ol", "p", "pre", "table", "tbody",
                         "td", "th", "thead", "tr", "ul"})
#: A run that may be base64 (either alphabet), hex, or ``\xNN`` escapes.
_ENCODED_RUN = re.compile(r"[A-Za-z0-9+/_\-]{8,}={0,2}|(?:\\x[0-9a-fA-F]{2}){4,}")
#: Letters of other scripts drawn like a Latin letter, and that letter (both cases).
HOMOGLYPHS: dict[str, str] = {
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧϜϹϲ", "ABEZHIKMNOPTYXFCc", strict=True)),  # Greek
    **dict(zip("αικνοορτυχ", "aiknoop" "tux", strict=True)),
    **dict(zip("АВЕЅІЈКМНОРСТУХѴԌԚԜ", "ABESIJKMHOPCTYXVGQW", strict=True)),  # Cyrillic
    **dict(zip("аеѕіјорсухԁһԛԝѵ", "aesijopcyxdhqwv", strict=True)),
}
#: Segments are read this deep at most (a segment's own runs once more).
SEGMENT_DEPTH = 2
_SHORT_ESCAPES = {"/": "/", '"': '"', "\\": "\\", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                  "t": "\t"}
#: Characters that are not dashes to Unicode but are written as one.
_DASHES = frozenset("\u2212\u2796\ufe63\uff0d")
#: Typographic apostrophes, written as ``'`` ("O’Brien" is "O'Brien").
_APOSTROPHES = frozenset("\u2018\u2019\u02bc\uff07")
#: Per-character forms already computed (bounded: a text can hold many distinct characters).
_FOLDED: dict[str, str] = {}
_CASED: dict[str, str] = {}
_CACHE_LIMIT = 1 << 16
#: What a decoding step may write that an earlier step decodes (another round is due).
_DECODABLE = frozenset("%\\&<")
#: Decoding rounds at most: a value encoded three times over is still found.
_ROUNDS = 3
#: Rewrite characters one by one when fewer than one in this many needs it, else translate.
_DENSE = 16


class _Map:
    """Where each character of a rewritten text came from in the text it was rewritten
    from: the rewritten pieces ``(start, end, source start, source end)``, sorted; every
    character outside a piece is a copy, shifted by the pieces before it."""

    __slots__ = ("_pieces", "_starts", "produced")

    def __init__(self, pieces: list[tuple[int, int, int, int]], produced: bool) -> None:
        self._pieces = pieces
        self._starts = [piece[0] for piece in pieces]
        #: Whether the rewriting wrote a ``%`` or a backslash (something to decode again).
        self.produced = produced

    def source(self, start: int, end: int) -> tuple[int, int]:
        """The source slice that characters ``[start, end)`` (not empty) came from."""
        return self._position(start, 0), self._position(end - 1, 1)

    def _position(self, index: int, after: int) -> int:
        """Source start (``after`` 0) or end (``after`` 1) of character ``index``."""
        i = bisect_right(self._starts, index) - 1
        if i < 0:
            return index + after
        _, end, source_start, source_end = self._pieces[i]
        if index < end:
            return source_end if after else source_start
        return source_end + index - end + after


class _Rewriter:
    """Builds a rewritten text left to right: copies of the source between replaced
    slices, and the :class:`_Map` back to the source."""

    __slots__ = ("_copy", "_length", "_parts", "_pieces", "_position", "_produced", "_source")

    def __init__(self, source: str, copy: str | None = None) -> None:
        self._source = source
        self._copy = source if copy is None else copy  # same length, copied from
        self._parts: list[str] = []
        self._pieces: list[tuple[int, int, int, int]] = []
        self._position = 0
        self._length = 0
        self._produced = False

    def replace(self, start: int, end: int, chars: str) -> None:
        """Write ``chars`` for source slice ``[start, end)`` (after the previous one)."""
        self._copy_to(start)
        if chars:
            self._produced = self._produced or chars in _DECODABLE
            self._pieces.append((self._length, self._length + len(chars), start, end))
            self._parts.append(chars)
            self._length += len(chars)
        elif self._pieces and self._pieces[-1][1] == self._length:
            # A dropped character (a combining accent) belongs to the one before it, so a
            # match ending there takes it along.
            first, last, source_start, _ = self._pieces[-1]
            self._pieces[-1] = (first, last, source_start, end)
        elif self._length:
            self._pieces.append((self._length - 1, self._length, start - 1, end))
        else:
            self._pieces.append((0, 0, start, end))
        self._position = end

    def substitute(self, position: int, char: str) -> None:
        """Write ``char`` for the one source character at ``position`` (offsets kept)."""
        self._copy_to(position)
        self._parts.append(char)
        self._length += 1
        self._position = position + 1

    def finish(self) -> tuple[str, _Map | None]:
        self._copy_to(len(self._source))
        mapping = _Map(self._pieces, self._produced) if self._pieces else None
        return "".join(self._parts), mapping

    def _copy_to(self, position: int) -> None:
        if position > self._position:
            self._parts.append(self._copy[self._position:position])
            self._length += position - self._position
            self._position = position


class SurfaceView:
    """The normalised form of a text (:attr:`text`) and the way back to its offsets.

    ``plain`` is true when the text is ASCII with nothing to decode: the view is then the
    text lower-cased, character for character. ``segments`` are its encoded runs, each
    decoded and read into a view of its own.
    """

    __slots__ = ("_maps", "plain", "segments", "text")

    def __init__(self, text: str, maps: list[_Map], plain: bool,
                 segments: tuple[Segment, ...] = ()) -> None:
        self.text = text
        self.plain = plain
        self._maps = maps
        self.segments = segments

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The slice of the original text that view characters ``[start, end)`` (not
        empty) came from: it holds every original character any of them came from."""
        for step in reversed(self._maps):
            start, end = step.source(start, end)
        return start, end


@dataclass(frozen=True, slots=True)
class Segment:
    """An encoded run of a text (base64, base64url, hex): ``[start, end)`` in the text,
    what it decodes to (``text``) and that text's own view."""

    start: int
    end: int
    text: str
    view: SurfaceView


def surface_view(text: str, *, _depth: int = 0) -> SurfaceView:
    """Read ``text`` into its normalised view (see the module docstring)."""
    current, maps = _decode(text)
    plain = not maps and text.isascii()
    segments = _segments(current, maps, _depth) if _depth < SEGMENT_DEPTH else ()
    current, mapping = _fold(current, _FOLDED, True)
    if mapping is not None:
        maps.append(mapping)
    return SurfaceView(current, maps, plain, segments)


def _segments(decoded: str, maps: list[_Map], depth: int) -> tuple[Segment, ...]:
    """The encoded runs of ``decoded`` (the text after ``maps``) that decode to printable
    text, with their offsets in the original text. A run with ``/`` in it (a URL's path)
    is tried whole and piece by piece. A run joined to others by dots (a JWT:
    ``header.payload.signature``) spans the whole token: the token is what gets redacted,
    so a value restored into it later stands on its own, not glued between dots."""
    found: list[Segment] = []
    chains = [m.span() for m in _DOTTED_TOKEN.finditer(decoded)] if "." in decoded else []
    chain_starts = [start for start, _ in chains]
    for match in _ENCODED_RUN.finditer(decoded):
        run, at = match.group(), match.start()
        if run.endswith("=") and match.end() < len(decoded) and \
                decoded[match.end()] in _ENCODED_SET:
            continue  # "name=value": the name, not a padded run
        candidates = [(at, run)]
        if "/" in run and not run.startswith("\\"):
            offset = at
            for piece in run.split("/"):
                if len(piece) >= 8:
                    candidates.append((offset, piece))
                offset += len(piece) + 1
        for start, candidate in candidates:
            if candidate[0] != "\\" and candidate.isalpha() and candidate[1:].islower():
                continue  # a word
            texts = _decodings(candidate)
            if not texts:
                continue
            first, last = start, start + len(candidate)
            i = bisect_right(chain_starts, first) - 1
            if i >= 0 and chains[i][1] >= last:
                first, last = chains[i]
            for step in reversed(maps):
                first, last = step.source(first, last)
            found += [Segment(first, last, text, surface_view(text, _depth=depth + 1))
                      for text in texts]
    return tuple(found)


#: Base64url runs joined by dots (a JWT), each found once per text.
_DOTTED_TOKEN = re.compile(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)+")
_ENCODED_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-=")


def _decodings(run: str) -> list[str]:
    """What ``run`` decodes to as hex or base64 (either alphabet), when that is printable
    UTF-8 text."""
    out: list[str] = []
    if run.startswith("\\x"):
        out.append(_printable(bytes.fromhex(run.replace("\\x", ""))))
    else:
        digits = run[2:] if run[:2] in ("0x", "0X") else run
        if len(digits) % 2 == 0 and all(c in _HEX for c in digits):
            out.append(_printable(bytes.fromhex(digits)))
        body = run.rstrip("=")
        if len(body) % 4 != 1:
            data = body.replace("-", "+").replace("_", "/") + "=" * (-len(body) % 4)
            with contextlib.suppress(binascii.Error, ValueError):
                out.append(_printable(base64.b64decode(data, validate=True)))
    return [text for text in out if text]


_HEX = frozenset("0123456789abcdefABCDEF")


def _printable(data: bytes) -> str:
    """``data`` as text when it is UTF-8 and printable (line breaks and tabs allowed), else
    the empty string."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    return text if len(text) >= 4 and text.translate(_LINE_BREAKS).isprintable() else ""


_LINE_BREAKS = {ord(c): None for c in "\t\n\r"}


def normalize(text: str) -> str:
    """The normalised view of ``text``, as a string (what a value is matched as)."""
    return surface_view(text).text


def cased_form(text: str) -> str:
    """``text`` decoded and normalised like the view, but with its case kept: what
    decides whether a one-word name was written in a case it is matched in."""
    return _fold(_decode(text)[0], _CASED, False)[0]


def _decode(text: str) -> tuple[str, list[_Map]]:
    """Undo percent-encoding and JSON escaping, again while a round decoded a ``%`` or a
    backslash (a value encoded twice, or escaped inside an encoded URL), for at most
    :data:`_ROUNDS` rounds (each is linear, so the whole is)."""
    maps: list[_Map] = []
    for _ in range(_ROUNDS):
        again = False
        for step in (_decode_percent, _decode_json, _decode_html, _strip_tags):
            text, mapping = step(text)
            if mapping is not None:
                maps.append(mapping)
                again = again or mapping.produced
        if not again:
            break
    return text, maps


def _decode_percent(text: str) -> tuple[str, _Map | None]:
    """Decode ``%XX`` sequences that are UTF-8; leave the others as they are."""
    if "%" not in text:
        return text, None
    rewriter: _Rewriter | None = None
    for match in _PERCENT_RUN.finditer(text):
        data = bytes.fromhex(match.group().replace("%", ""))
        base, i = match.start(), 0
        while i < len(data):
            size = _utf8_size(data[i])
            char = _utf8_char(data[i:i + size]) if size else None
            if char is None:
                i += 1  # not UTF-8: the %XX stays as written
                continue
            rewriter = rewriter or _Rewriter(text)
            rewriter.replace(base + 3 * i, base + 3 * (i + size), char)
            i += size
    return (text, None) if rewriter is None else rewriter.finish()


def _utf8_size(lead: int) -> int:
    """Bytes of the UTF-8 sequence starting with ``lead`` (0: not a lead byte)."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def _utf8_char(data: bytes) -> str | None:
    try:
        char = data.decode("utf-8")
    except UnicodeDecodeError:  # truncated, overlong, a surrogate
        return None
    return char if len(char) == 1 else None


def _decode_json(text: str) -> tuple[str, _Map | None]:
    """Decode JSON string escapes; a lone surrogate escape stays as written."""
    if "\\" not in text:
        return text, None
    rewriter: _Rewriter | None = None
    for match in _JSON_ESCAPE.finditer(text):
        high, low, code, short = match.groups()
        if high:
            char = chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + int(low, 16) - 0xDC00)
        elif code:
            point = int(code, 16)
            if 0xD800 <= point <= 0xDFFF:
                continue
            char = chr(point)
        else:
            char = _SHORT_ESCAPES[short]
        rewriter = rewriter or _Rewriter(text)
        rewriter.replace(match.start(), match.end(), char)
    return (text, None) if rewriter is None else rewriter.finish()


def _decode_html(text: str) -> tuple[str, _Map | None]:
    """Decode HTML character references; an unknown name or code point stays as written."""
    if "&" not in text:
        return text, None
    rewriter: _Rewriter | None = None
    for match in _HTML_REFERENCE.finditer(text):
        decimal, hexadecimal, name = match.groups()
        if name is not None:
            if not match.group().endswith(";"):
                continue
            char = html.entities.html5.get(name + ";")
            if char is None:
                continue
        else:
            point = int(decimal) if decimal is not None else int(hexadecimal, 16)
            if not 0 < point <= 0x10FFFF or 0xD800 <= point <= 0xDFFF:
                continue
            char = chr(point)
        rewriter = rewriter or _Rewriter(text)
        rewriter.replace(match.start(), match.end(), char)
    return (text, None) if rewriter is None else rewriter.finish()


def _strip_tags(text: str) -> tuple[str, _Map | None]:
    """Drop the tags of HTML elements (``Ana <b>García</b>`` reads ``Ana García``; a
    line-breaking one reads as a space)."""
    if "<" not in text:
        return text, None
    rewriter: _Rewriter | None = None
    for match in _HTML_TAG.finditer(text):
        rewriter = rewriter or _Rewriter(text)
        rewriter.replace(match.start(), match.end(),
                         " " if match.group(1).lower() in _BLOCK_TAGS else "")
    return (text, None) if rewriter is None else rewriter.finish()


def _fold(text: str, cache: dict[str, str], casefold: bool) -> tuple[str, _Map | None]:
    """Map each character to its normalised form (see :func:`_char_form`)."""
    if text.isascii():
        return (text.lower() if casefold else text), None
    distinct = set(text)
    if len(cache) + len(distinct) > _CACHE_LIMIT:
        cache.clear()
    forms: dict[str, str] = {}
    for char in distinct:
        form = cache.get(char)
        if form is None:
            form = cache[char] = _char_form(char, casefold)
        forms[char] = form
    # Most characters come out as lower() makes them (C speed); only the others are
    # rewritten: one character for one keeps the offsets, the rest (accents typed as
    # combining marks, ligatures, "ß") become pieces of the map.
    lower = casefold and all(len(c.lower()) == 1 for c in distinct)
    special = {c: form for c, form in forms.items() if form != (c.lower() if lower else c)}
    if special and sum(map(text.count, special)) * _DENSE > len(text):
        # Many to rewrite (Greek, Vietnamese...): one translation pass is cheaper.
        base = text.translate({ord(c): form for c, form in forms.items()
                               if form != c and len(form) == 1})
        special = {c: form for c, form in special.items() if len(form) != 1}
    else:
        base = text.lower() if lower else text
    if not special:
        return base, None
    positions: list[int] = []
    for char in special:
        at = text.find(char)
        while at != -1:
            positions.append(at)
            at = text.find(char, at + 1)
    positions.sort()
    rewriter = _Rewriter(text, base)
    for at in positions:
        form = special[text[at]]
        if len(form) == 1:
            rewriter.substitute(at, form)
        else:
            rewriter.replace(at, at + 1, form)
    return rewriter.finish()


def _char_form(char: str, casefold: bool) -> str:
    """One character normalised: NFKC, case folded (if ``casefold``), without accents or
    invisible format characters, decimal digits as ASCII digits, dashes as ``-``,
    apostrophes as ``'`` and a Latin look-alike as its Latin letter."""
    char = HOMOGLYPHS.get(char, char)
    form = unicodedata.normalize("NFKC", char)
    if casefold:
        form = form.casefold()
    form = "".join(c for c in unicodedata.normalize("NFD", form)
                   if unicodedata.category(c) not in ("Mn", "Cf"))
    out = []
    for c in unicodedata.normalize("NFC", form):
        category = unicodedata.category(c)
        if category == "Nd":
            c = str(unicodedata.decimal(c))
        elif category == "Pd" or c in _DASHES:
            c = "-"
        elif c in _APOSTROPHES:
            c = "'"
        else:
            c = HOMOGLYPHS.get(c, c)
        out.append(c)
    return "".join(out)
