"""``Ref``: a polymorphic ``(type, id)`` reference to something the application owns.

chatkeep never needs the referenced rows themselves: a tenant may be an
``organization`` in one product and a ``workspace`` in another, so we store the
pair. Ids may be ``int`` or ``str`` and come back with the type they went in with,
but they are stored as text, so references compare by ``(type, id text)``:
``Ref("org", 1) == Ref("org", "1")``, in Python as in every query. ``Ref.coerce`` turns
the other ways a caller may name one (``"org:1"``, a mapping, an object with ``type``
and ``id``) into a ``Ref``, so a check never skips a tenant it cannot recognise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from chatkeep.errors import InvalidReference
from chatkeep.validation import REF_ID_MAX, REF_TYPE_MAX, check_text

RefId = int | str
_INT_ID_BITS = 848  # 2**848 has 256 digits: no int above fits the id column


@dataclass(frozen=True, slots=True, eq=False)
class Ref:
    """A reference to an application object: ``Ref("organization", 42)``.

    Equal (and hashing alike) when type and id text match, as the database sees them:
    ``Ref("org", 1)`` and ``Ref("org", "1")`` name the same tenant.
    """

    type: str
    id: RefId

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type.strip():
            raise InvalidReference(
                f"reference type must be a non-empty string, got {self.type!r}"[:200])
        check_text(self.type, "reference type", error=InvalidReference,
                   max_length=REF_TYPE_MAX)
        if isinstance(self.id, bool) or not isinstance(self.id, int | str):
            raise InvalidReference(
                f"reference id must be an int or a str, got {type(self.id).__name__}"
            )
        if isinstance(self.id, int):
            # Checked before str(): a huge int has no text form within the column (and
            # Python refuses to print one of over 4300 digits).
            if self.id.bit_length() > _INT_ID_BITS or len(str(self.id)) > REF_ID_MAX:
                raise InvalidReference(
                    f"reference id for {self.type!r} is longer than {REF_ID_MAX} digits")
            return
        if not self.id.strip():
            raise InvalidReference(f"reference id for {self.type!r} must not be empty")
        check_text(self.id, f"reference id for {self.type!r}", error=InvalidReference,
                   max_length=REF_ID_MAX)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ref):
            return NotImplemented
        return self.type == other.type and self.id_text == other.id_text

    def __hash__(self) -> int:
        return hash((self.type, self.id_text))

    @property
    def id_text(self) -> str:
        """The id as stored in the database (text column)."""
        return str(self.id)

    @property
    def id_is_int(self) -> bool:
        """Whether the id was an ``int``, so it can round-trip through the text column."""
        return isinstance(self.id, int)

    @classmethod
    def from_columns(cls, type_: str | None, id_text: str | None,
                     is_int: bool | None) -> Ref | None:
        """Rebuild a reference from its stored columns (``None`` when the columns are null)."""
        if type_ is None or id_text is None:
            return None
        # Stored values were checked on the way in: skip the checks (a hot read path).
        ref = object.__new__(cls)
        object.__setattr__(ref, "type", type_)
        object.__setattr__(ref, "id", int(id_text) if is_int else id_text)
        return ref

    def __str__(self) -> str:
        return f"{self.type}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> Ref:
        """Parse ``"type:id"`` (as the CLI takes it). The id is an ``int`` only when it is
        a canonical ASCII decimal (``7``, ``42``; not ``007``, ``+7``, ``١٢`` or ``²``):
        anything else stays the string typed, so a parse never names another tenant."""
        if not isinstance(text, str):
            raise InvalidReference(f"expected TYPE:ID text, got {type(text).__name__}")
        type_, sep, id_ = text.partition(":")
        if not sep:
            raise InvalidReference(f"expected TYPE:ID, got {text!r}")
        return cls(type_, int(id_) if is_canonical_int(id_) else id_)

    @classmethod
    def coerce(cls, value: object) -> Ref:
        """``value`` as a ``Ref``: a ``Ref`` as it is, ``"type:id"`` text (:meth:`parse`),
        a mapping with ``type`` and ``id`` keys, or an object with ``type`` and ``id``
        attributes. ``InvalidReference`` for anything else, so whoever checks a tenant
        named in some other shape refuses it rather than not checking at all."""
        if isinstance(value, Ref):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, Mapping):
            type_, id_ = value.get("type"), value.get("id")
        else:
            type_, id_ = getattr(value, "type", None), getattr(value, "id", None)
        if type_ is None or id_ is None:
            raise InvalidReference(
                "expected a Ref, TYPE:ID text, or a mapping or object with type and id; "
                f"got {type(value).__name__}")
        return cls(type_, id_)  # __post_init__ checks both


def is_canonical_int(text: str) -> bool:
    """Whether ``text`` is the decimal form Python prints for an int (``str(int(text)) ==
    text``, ASCII digits only): only those ids may become ``int`` without changing."""
    if not (text.isascii() and text.isdigit()) or len(text) > REF_ID_MAX:
        return False
    return str(int(text)) == text


def require_ref(value: object, what: str) -> Ref:
    """Check that ``value`` is a ``Ref`` (tenant is required everywhere)."""
    if not isinstance(value, Ref):
        raise InvalidReference(f"{what} must be a chatkeep.Ref, got {value!r}")
    return value
