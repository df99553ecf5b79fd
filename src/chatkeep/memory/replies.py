"""Validation of the model's JSON replies; anything off-shape is a ``DistillationError``.

Strict on purpose: a reply we cannot fully trust writes nothing and leaves the
watermark where it was, so the range is retried rather than half-remembered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from chatkeep.errors import DistillationError
from chatkeep.memory.scopes import Scope

MAX_FACTS = 50
MAX_FACT_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact the model proposes, with the scope it chose."""

    scope: Scope
    content: str


class Event(StrEnum):
    """What to do with a new fact, against its nearest memories (mem0's vocabulary)."""

    ADD = "ADD"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    NONE = "NONE"


@dataclass(frozen=True, slots=True)
class Decision:
    """The model's decision for one fact; ``target`` is a prompt alias (``m1``)."""

    fact: int
    event: Event
    target: str | None = None
    text: str | None = None


def _load(text: str, key: str) -> list[Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DistillationError(f"the model's reply is not JSON: {exc}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get(key), list):
        raise DistillationError(f'the model\'s reply is not an object with a "{key}" list')
    items: list[Any] = data[key]
    return items


def _clean(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DistillationError(f"{what} must be a non-empty string, got {value!r}")
    text = " ".join(value.split())
    if len(text) > MAX_FACT_CHARS:
        raise DistillationError(f"{what} is longer than {MAX_FACT_CHARS} characters")
    return text


def parse_facts(text: str) -> list[Fact]:
    """``{"facts": [{"scope": ..., "content": ...}]}`` -> facts."""
    items = _load(text, "facts")
    if len(items) > MAX_FACTS:
        raise DistillationError(f"the model proposed {len(items)} facts (at most {MAX_FACTS})")
    facts = []
    for n, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise DistillationError(f"fact {n} is not an object")
        raw_scope = item.get("scope")
        try:
            scope = Scope(str(raw_scope).strip().lower())
        except ValueError:
            raise DistillationError(f"fact {n} has an unknown scope {raw_scope!r}") from None
        facts.append(Fact(scope, _clean(item.get("content"), f"fact {n} content")))
    return facts


def parse_decisions(text: str, candidates: Mapping[int, Sequence[str]]) -> dict[int, Decision]:
    """``{"decisions": [...]}`` -> one decision per fact index in ``candidates`` (which maps
    each fact asked about to the aliases it was shown)."""
    decisions: dict[int, Decision] = {}
    for n, item in enumerate(_load(text, "decisions")):
        if not isinstance(item, Mapping):
            raise DistillationError(f"decision {n} is not an object")
        fact = item.get("fact")
        if isinstance(fact, bool) or not isinstance(fact, int) or fact not in candidates:
            raise DistillationError(f"decision {n} names an unknown fact {fact!r}")
        if fact in decisions:
            raise DistillationError(f"fact {fact} has two decisions")
        try:
            event = Event(str(item.get("event")).strip().upper())
        except ValueError:
            raise DistillationError(
                f"decision {n} has an unknown event {item.get('event')!r}") from None
        target = item.get("target")
        if target is not None and target not in candidates[fact]:
            raise DistillationError(f"decision {n} targets {target!r}, which was not listed")
        if event in (Event.UPDATE, Event.DELETE) and target is None:
            raise DistillationError(f"decision {n} ({event}) needs a target")
        new_text = item.get("text")
        decisions[fact] = Decision(
            fact, event, target,
            _clean(new_text, f"decision {n} text") if event is Event.UPDATE and new_text
            else None)
    missing = sorted(set(candidates) - set(decisions))
    if missing:
        raise DistillationError(f"no decision for facts {missing}")
    return decisions
