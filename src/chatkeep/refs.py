"""``Ref``: a polymorphic ``(type, id)`` reference to something the application owns.

chatkeep never needs the referenced rows themselves: a tenant may be an
``organization`` in one product and a ``workspace`` in another, so we store the
pair. Ids may be ``int`` or ``str`` and come back with the type they went in with.
"""

from __future__ import annotations

from dataclasses import dataclass

from chatkeep.errors import InvalidReference

RefId = int | str


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to an application object: ``Ref("organization", 42)``."""

    type: str
    id: RefId

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type.strip():
            raise InvalidReference(f"reference type must be a non-empty string, got {self.type!r}")
        if len(self.type) > 64:
            raise InvalidReference(f"reference type is longer than 64 characters: {self.type!r}")
        if isinstance(self.id, bool) or not isinstance(self.id, int | str):
            raise InvalidReference(
                f"reference id must be an int or a str, got {type(self.id).__name__}"
            )
        if isinstance(self.id, str) and not self.id.strip():
            raise InvalidReference(f"reference id for {self.type!r} must not be empty")
        if len(self.id_text) > 255:
            raise InvalidReference(f"reference id for {self.type!r} is longer than 255 characters")

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
        return cls(type_, int(id_text) if is_int else id_text)

    def __str__(self) -> str:
        return f"{self.type}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> Ref:
        """Parse ``"type:id"`` (as the CLI takes it); an all-digit id becomes an ``int``."""
        type_, sep, id_ = text.partition(":")
        if not sep:
            raise InvalidReference(f"expected TYPE:ID, got {text!r}")
        return cls(type_, int(id_) if id_.isdigit() else id_)


def require_ref(value: object, what: str) -> Ref:
    """Check that ``value`` is a ``Ref`` (tenant is required everywhere)."""
    if not isinstance(value, Ref):
        raise InvalidReference(f"{what} must be a chatkeep.Ref, got {value!r}")
    return value
