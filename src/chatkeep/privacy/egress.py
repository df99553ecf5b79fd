"""The one way out: every body bound for a model passes through a session's egress.

A session's :class:`SessionEgress` holds its placeholder vault in memory. It is used in
two places, always in this order:

* as the planner's text filter (``egress(text, context)``): each outgoing text redacted
  with the detector, with the question it answers as context, and with every value the
  vault already holds (escaping placeholder-shaped text the user typed);
* as the last step before bytes leave (``egress.scrub(body)``): the whole request body,
  every string and every object key of it, whatever field it sits in (tool names and
  arguments, a Chat ``name``, reasoning summaries, annotations, items handed back as
  recorded). Detection runs over the whole body *first*, so a value first seen late in a
  request is redacted early in it too; then every raw span is replaced.

Blocks a provider signs are recognised by where the wire formats put them, never by a key
name alone (a tool's structured result may well have a ``signature`` field holding a name):
the body's message list is its top-level list, or the list under ``messages`` or
``input``; in it, a Responses ``reasoning`` item's ``encrypted_content`` goes out
byte-identical, and in an assistant message's ``content`` list an Anthropic
``redacted_thinking`` block goes out whole and a ``thinking`` block's ``signature``
byte-identical. A signed block whose visible text would change (a detected value in a
thought) is withheld whole rather than sent (see :data:`WITHHELD_NOTE`); a reasoning
item's summary is not signed and is redacted. A message's ``role`` and a block's or
item's ``type`` are the formats' vocabulary and go out as they are, but only there:
anywhere else (tool arguments, structured results, metadata) every key and string is
user data. A framework whose body has a shape of its own marks its signed parts with
:class:`Signed`.

New placeholders live in memory until :meth:`SessionEgress.flush` stores the vault with
compare-and-set: callers flush before anything leaves, so every placeholder a model sees
is already stored, and a lost race means "plan again from the stored vault".

Model clients are only reached through :func:`outgoing`, which refuses a body when no
egress is bound (:func:`bound`): a code path that forgot the egress fails closed instead
of sending. ``tests/privacy/test_one_egress.py`` checks that no module calls a client
around it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, TypeVar

from chatkeep.errors import PrivacyError
from chatkeep.privacy.base import Span
from chatkeep.privacy.detector import resolve_for_redaction
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault

__all__ = ["OPEN", "Egress", "OpenEgress", "SessionEgress", "Signed", "bound", "current",
           "map_strings", "outgoing"]

T = TypeVar("T")

#: Keys of a request body holding its message list (Chat and Anthropic ``messages``,
#: Responses and the Agents SDK ``input``).
MESSAGE_LISTS = frozenset({"messages", "input"})
#: Block types of an assistant message's ``content`` list that are wholly provider-encrypted
#: (no visible text): sent as received.
OPAQUE_BLOCKS = frozenset({"redacted_thinking"})
#: Signed block types of an assistant message's ``content`` list, and the field that
#: carries the signature (sent as received; the block's other text must not change).
SIGNED_BLOCKS = {"thinking": "signature"}
#: Signed item types of a message list, and the field that carries the encrypted payload
#: (sent as received; the item's other text must not change, but for its ``summary``).
SIGNED_ITEMS = {"reasoning": "encrypted_content"}
#: Fields of a signed item that the provider does not sign (redacted like any text).
UNSIGNED_FIELDS = frozenset({"summary"})
#: What a ``role`` or ``type`` of the wire formats looks like: a value of another shape at
#: those positions is user data after all, and redacted.
_VOCABULARY = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: Why a signed block may be missing from a history (logged and documented): its visible
#: text holds a detected value, it cannot be redacted without breaking the signature, and
#: sending it would let the value out. With Anthropic extended thinking enabled, the
#: provider then refuses that request, so the turn is finished with thinking disabled.
WITHHELD_NOTE = ("a signed thinking block holding a detected value was withheld "
                 "(its text cannot be redacted without breaking its signature)")

_DROP = object()
_CURRENT: ContextVar[Egress | None] = ContextVar("chatkeep_egress", default=None)


class Egress(Protocol):
    """What a session lets out: the planner's text filter, the whole-body scrub, and the
    vault's store step."""

    def __call__(self, text: str, context: str | None = None) -> str:
        """One outgoing text, redacted (``context``: the message it answers)."""
        ...

    def scrub(self, payload: T, context: str | None = None) -> T:
        """A whole request body (any JSON-like value) with no raw detected value left;
        ``context``: the conversation message the body's new input answers (a bare number
        after "your social security number?"), read with every string of it."""
        ...

    def flush(self) -> bool:
        """Store placeholders allocated since the last flush; ``False``: another writer
        stored first, so this egress reloaded the stored vault and the caller plans again."""
        ...

    @property
    def withheld(self) -> int:
        """How many signed blocks ``scrub`` withheld (see :data:`WITHHELD_NOTE`)."""
        ...


class OpenEgress:
    """The egress of a session that does not redact: its text leaves as it is."""

    withheld = 0

    def __call__(self, text: str, context: str | None = None) -> str:
        """``text`` unchanged."""
        return text

    def scrub(self, payload: T, context: str | None = None) -> T:
        """``payload`` unchanged."""
        return payload

    def flush(self) -> bool:
        """Nothing to store."""
        return True


#: The shared open egress (it holds no state).
OPEN = OpenEgress()


@dataclass(frozen=True, slots=True)
class Signed:
    """A part a provider signed, in a body of a framework's own shape (which the egress
    cannot read by wire position): ``value`` holds its visible text only. ``scrub`` hands
    the marker back as it is, or, when that text would change, withholds it: it is left
    out of the list or object holding it (counted in ``withheld``)."""

    value: Any

#: Stores a sealed vault if the stored version is still ``version`` (compare-and-set).
StoreVault = Callable[[int, PlaceholderVault], bool]
#: Reads the stored vault and its version.
LoadVault = Callable[[], tuple[PlaceholderVault, int]]


class SessionEgress:
    """The egress of one redacting session for one request (or one job)."""

    def __init__(self, redactor: Redactor, vault: PlaceholderVault, version: int, *,
                 store: StoreVault, load: LoadVault,
                 carried: Sequence[PlaceholderVault] = ()) -> None:
        self.redactor = redactor
        self._store, self._load = store, load
        self._carried = list(carried)
        self._produced: dict[str, int] = {}
        self.withheld = 0
        self._adopt(vault, version)

    def _adopt(self, vault: PlaceholderVault, version: int) -> None:
        """Take the stored vault; values carried by recalled memories join it under this
        session's own placeholders."""
        self.vault, self.version, self._stored = vault, version, len(vault)
        for carried in self._carried:
            for entity_type, canonical, value in carried.entries():
                self.vault.placeholder_for(entity_type, value, canonical)
        self._produced.clear()

    def __call__(self, text: str, context: str | None = None) -> str:
        # The size before: the redactor looked for known values before it detected new
        # ones, so another form of a value first detected in this very text is still to
        # be looked for in it (the scrub does).
        before = len(self.vault)
        redacted = self.redactor.redact(text, self.vault, context)
        self._produced.setdefault(redacted, before)
        return redacted

    def scrub(self, payload: T, context: str | None = None) -> T:
        """``payload`` with no raw value left in any string or key: detection over the
        whole body first, then every span replaced (see the module docstring).
        ``context`` is the message the body's new input answers: every string is read
        with it, so a value only its question identifies is found too."""
        detected: dict[str, list[Span]] = {}
        for text in _strings(payload):
            if text not in detected:
                detected[text] = self._detect(text, context)
        cache: dict[str, str] = {}

        def replace(text: str) -> str:
            done = cache.get(text)
            if done is None:
                done = cache[text] = self._replace(text, detected.get(text, ()))
            return done

        result = _rebuild(payload, replace, self)
        if result is _DROP:  # the payload itself was a signed part that would change
            raise PrivacyError(f"a signed part cannot be sent: {WITHHELD_NOTE}")
        return result  # type: ignore[no-any-return]

    def _detect(self, text: str, context: str | None = None) -> list[Span]:
        """Pass one: what the detector finds in ``text`` joins the vault now, so pass two
        redacts it wherever it stands in the body. A ``context`` only adds findings: the
        text is read without it too (a question can also make a recognizer doubt a value,
        "order number?" before a bare number, and a body's older strings did not answer
        it). Text this egress produced was already read with its context; only the
        vault's values are looked for in it again."""
        if text in self._produced or not text.strip():
            return []
        detector = self.redactor.detector
        spans = detector.detect(text)
        if context:
            spans = [*spans, *detector.detect(text, context)]  # pass two resolves overlaps
        for span in spans:
            self.vault.placeholder_for(span.entity_type, span.text, span.canonical)
        return spans

    def _replace(self, text: str, detected: Sequence[Span]) -> str:
        """Pass two: every raw span (detected, or a value the vault holds in any surface
        form) replaced by its placeholder; the rest of the text is left exactly as it is
        (placeholders and escapes the planner wrote stay intact)."""
        since = self._produced.get(text)
        if since is not None:  # redacted here already: only values learned since then
            if since == len(self.vault):
                return text
            detected = ()
        spans = resolve_for_redaction([*detected, *self.vault.find_known(text, since or 0)])
        if not spans:
            return text
        parts: list[str] = []
        position = 0
        for span in spans:
            parts += [text[position:span.start],
                      self.vault.placeholder_for(span.entity_type, span.text, span.canonical)]
            position = span.end
        parts.append(text[position:])
        return "".join(parts)

    def flush(self) -> bool:
        """Store new placeholders with compare-and-set; on a lost race, reload the stored
        vault and answer ``False`` (the caller plans again)."""
        if len(self.vault) == self._stored:
            return True
        if self._store(self.version, self.vault):
            self.version += 1
            self._stored = len(self.vault)
            return True
        self._adopt(*self._load())
        return False


class _At(Enum):
    """Where a value sits in a request body, as far as the wire formats say."""

    DATA = "data"  # user data: every key and string redacted
    BODY = "body"  # the payload itself
    ITEMS = "items"  # a message list
    ITEM = "item"  # a message or Responses item
    BLOCKS = "blocks"  # a content list (or tool calls, summary, annotations)
    ASSISTANT_BLOCKS = "assistant_blocks"  # an assistant message's content list
    BLOCK = "block"
    ASSISTANT_BLOCK = "assistant_block"


#: Where a list's elements sit, by where the list sits.
_ELEMENTS = {_At.BODY: _At.ITEM, _At.ITEMS: _At.ITEM, _At.BLOCKS: _At.BLOCK,
             _At.ASSISTANT_BLOCKS: _At.ASSISTANT_BLOCK}
#: Keys of an item or block holding a list of blocks.
_BLOCK_LISTS = frozenset({"content", "tool_calls", "output", "summary", "annotations"})
#: A field sent exactly as received (signed, encrypted, or the formats' vocabulary).
_RAW = None


def _element(where: _At, item: Any) -> _At:
    """Where an element of a list at ``where`` sits."""
    return _ELEMENTS.get(where, _At.DATA) if isinstance(item, dict) else _At.DATA


def _field(where: _At, parent: Mapping[Any, Any], key: Any, item: Any) -> _At | None:
    """Where ``parent[key]`` sits (``parent`` at ``where``); ``None``: sent as received."""
    if where is _At.DATA:
        return _At.DATA
    if where is _At.BODY:
        return _At.ITEMS if key in MESSAGE_LISTS and isinstance(item, list | tuple) else (
            _At.BLOCKS if key == "system" and isinstance(item, list | tuple) else _At.DATA)
    if key == "type" or (key == "role" and where is _At.ITEM):
        if isinstance(item, str) and _VOCABULARY.fullmatch(item):
            return _RAW
        return _At.DATA
    kind = str(parent.get("type"))
    if where is _At.ITEM and key == SIGNED_ITEMS.get(kind):
        return _RAW
    if where is _At.ASSISTANT_BLOCK and key == SIGNED_BLOCKS.get(kind):
        return _RAW
    if key in _BLOCK_LISTS and isinstance(item, list | tuple):
        if where is _At.ITEM and key == "content" and parent.get("role") == "assistant":
            return _At.ASSISTANT_BLOCKS
        return _At.BLOCKS
    return _At.DATA


def _signed(where: _At, value: Mapping[Any, Any]) -> bool:
    """A block whose visible text the provider signed (it must not change)."""
    kind = value.get("type")
    if where is _At.ITEM:
        return kind in SIGNED_ITEMS and SIGNED_ITEMS[kind] in value
    return where is _At.ASSISTANT_BLOCK and kind in SIGNED_BLOCKS and \
        SIGNED_BLOCKS[kind] in value


def _opaque(where: _At, value: Mapping[Any, Any]) -> bool:
    """A wholly provider-encrypted block: sent as received."""
    return where is _At.ASSISTANT_BLOCK and value.get("type") in OPAQUE_BLOCKS


def _strings(value: Any, where: _At = _At.BODY) -> Iterator[str]:
    """Every string of a JSON-like value that ``_rebuild`` may rewrite, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Signed):
        yield from _strings(value.value, _At.DATA)
    elif isinstance(value, dict):
        if _opaque(where, value):
            return
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            at = _field(where, value, key, item)
            if at is not _RAW:
                yield from _strings(item, at)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, _element(where, item))


def _rebuild(value: Any, replace: Callable[[str], str], egress: SessionEgress,
             where: _At = _At.BODY) -> Any:
    """``value`` with every string rewritten by ``replace``; signed fields as they are; a
    signed block whose text would change is withheld (``_DROP``: its list or object leaves
    it out, so the sentinel never stays in a body)."""
    if isinstance(value, str):
        return replace(value)
    if isinstance(value, Signed):
        if _rebuild(value.value, replace, egress, _At.DATA) != value.value:
            egress.withheld += 1
            return _DROP
        return value
    if isinstance(value, dict):
        if _opaque(where, value):
            return value
        signed = _signed(where, value)
        out: dict[Any, Any] = {}
        for key, item in value.items():
            at = _field(where, value, key, item)
            if at is _RAW:
                out[key] = item
                continue
            new = _rebuild(item, replace, egress, at)
            new_key = replace(key) if isinstance(key, str) else key
            if signed and (new != item or new_key != key) and key not in UNSIGNED_FIELDS:
                # A signed block's visible text cannot change: withhold the block.
                egress.withheld += 1
                return _DROP
            if new is not _DROP:
                out[new_key] = new
        return out
    if isinstance(value, list | tuple):
        items = [_rebuild(item, replace, egress, _element(where, item)) for item in value]
        return [item for item in items if item is not _DROP]
    return value


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """A JSON-like value with ``fn`` applied to every string value (keys kept)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {key: map_strings(item, fn) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [map_strings(item, fn) for item in value]
    return value


@contextlib.contextmanager
def bound(egress: Egress) -> Iterator[Egress]:
    """Bind ``egress`` for the model calls made inside the block (see :func:`outgoing`)."""
    token = _CURRENT.set(egress)
    try:
        yield egress
    finally:
        _CURRENT.reset(token)


def current() -> Egress | None:
    """The egress bound for the running code, if any."""
    return _CURRENT.get()


def outgoing(payload: T) -> T:
    """What a model client may send: ``payload`` scrubbed by the bound egress, whose vault
    is stored before this returns. Fails closed: with no egress bound, or when the vault
    cannot be stored, a ``PrivacyError`` is raised and nothing is sent."""
    egress = _CURRENT.get()
    if egress is None:
        raise PrivacyError("a model call outside chatkeep's egress: every request must be "
                           "made inside privacy.egress.bound(...) so it can be redacted")
    body = egress.scrub(payload)
    if not egress.flush():
        raise PrivacyError("the session's placeholder mapping changed while this request "
                           "was being redacted; nothing was sent, try again")
    return body
