"""What a framework's run context says about the parties: one reading for every adapter.

A run may name its tenant (or actor, or subject) in whatever the framework carries
along: the Agents SDK's ``context``, Pydantic AI's ``deps`` or ``metadata``, LangGraph's
runtime ``context``. Each adapter reads it the same way, so an app that moves between
frameworks keeps its convention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chatkeep.errors import InvalidReference
from chatkeep.refs import Ref


def named_party(source: Any, name: str) -> Ref | None:
    """The reference ``source`` names under ``chatkeep_<name>`` or ``<name>``, as a key of
    a mapping or an attribute: a ``Ref``, ``"type:id"`` text, a mapping or an object with
    ``type`` and ``id``. ``None`` when it names none; a value that cannot be read as a
    reference is ``InvalidReference``, never ignored (a run routed by a typo would
    otherwise land in the default tenant)."""
    if source is None:
        return None
    for key in (f"chatkeep_{name}", name):
        value = source.get(key) if isinstance(source, Mapping) else \
            getattr(source, key, None)
        if value is not None:
            try:
                return Ref.coerce(value)
            except InvalidReference as exc:
                raise InvalidReference(f"the run's {key} is not a {name} reference: "
                                       f"{exc}") from exc
    return None
