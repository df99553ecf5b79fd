"""``Ref``: a polymorphic ``(type, id)`` reference to something the application owns.

chatkeep never needs the referenced rows themselves: a tenant may be an
``organization`` in one product and a ``workspace`` in another, so we store the
pair. Ids may be ``int`` or ``str`` and come back with the type they went in with.
"""

from __future__ import annotations

from dataclasses import dataclass

from chatkeep.errors import InvalidReference
from chatkeep.validation import REF_ID_MAX, REF_TYPE_MAX, check_text

RefId = int | str
_INT_ID_BITS = 848  # 2**848 has 256 digits: no int above fits the id column


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to an application object: ``Ref("organization", 42)``."""

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
