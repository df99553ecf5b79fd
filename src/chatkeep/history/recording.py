"""Recording a built request's manifest: the round's last step once its body may leave.

:meth:`HistoryRound.run <chatkeep.history.round.HistoryRound.run>` calls
:func:`record` after the commit answered ``Ready``: the manifest
(:mod:`chatkeep.history.manifest`) of the plan that went out, stored as the session's
next turn with the texts it names (the system prompt, literal memories, the config
snapshot: each once per session). The digests of those texts are cached per process, so
a turn hashes only the request itself.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from chatkeep.history.manifest import (
    Manifest,
    chatkeep_version,
    config_snapshot,
    request_digest,
    text_digest,
)

if TYPE_CHECKING:
    from chatkeep.history.round import HistoryRound, PreparedRound
    from chatkeep.store.quotas import Boarding

__all__ = ["body_digest", "privacy_digest", "record"]


def body_digest(body: Any) -> str:
    """SHA-256 of a built history (its messages, and Anthropic's ``system`` text)."""
    system = getattr(body, "system", None)
    return request_digest(body, system if isinstance(system, str) else None)


def privacy_digest(outbound_filter: Any) -> str:
    """A digest of the privacy settings a request was redacted under (its recognizers and
    switches; never the encryption key): what tells a replay that redaction changed."""
    if outbound_filter is None:
        return "-"
    config = getattr(outbound_filter, "config", None)
    fields = {k: v for k, v in sorted(getattr(config, "__dict__", {}).items())
              if "key" not in k} if config is not None and hasattr(config, "__dict__") \
        else _slots(config)
    redactor = getattr(outbound_filter, "redactor", None)
    detector = getattr(redactor, "detector", None)
    names = [type(r).__qualname__ for r in getattr(detector, "recognizers", ())]
    return hashlib.sha256(repr((type(outbound_filter).__qualname__, fields, names))
                          .encode()).hexdigest()[:22]


def _slots(config: Any) -> dict[str, Any]:
    names = getattr(type(config), "__slots__", ())
    return {n: getattr(config, n) for n in sorted(names) if "key" not in n}


@functools.lru_cache(maxsize=256)
def _digest(text: str) -> str:
    return text_digest(text)


_SNAPSHOTS: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int, int], str]] = \
    weakref.WeakKeyDictionary()


def _snapshot(compressor: Any) -> str:
    """The compressor's config snapshot, made again only when its config, counter or
    filter object changed (each turn records it)."""
    key = (id(compressor.config), id(compressor.counter), id(compressor.outbound_filter))
    cached = _SNAPSHOTS.get(compressor)
    if cached is None or cached[0] != key:
        cached = (key, config_snapshot(compressor.config, compressor.counter,
                                       privacy_digest(compressor.outbound_filter)))
        _SNAPSHOTS[compressor] = cached
    return cached[1]


def record(history_round: HistoryRound, prepared: PreparedRound, digest: str, *,
           reservation: Boarding | None = None) -> int:
    """Store the manifest of ``prepared`` (its body's SHA-256 is ``digest``) as the
    session's next turn; returns the turn. ``reservation``: the call's quota
    reservation, written with it (a refusal, ``QuotaExceeded``, writes neither)."""
    compressor, session = history_round.compressor, history_round.session
    texts: dict[str, str] = {}

    def named(text: str) -> str:
        key = _digest(text)
        texts[key] = text
        return key

    memories = _memories(history_round.recalled, named)
    snapshot = _snapshot(compressor)
    vault = getattr(prepared.egress, "vault", None)
    manifest = Manifest(
        format=history_round.format, summary_version=prepared.row.summary_version,
        watermark=prepared.row.summary_watermark, last_seq=prepared.last_seq,
        messages=prepared.read, vault=0 if vault is None else len(vault),
        memories=memories, system=named(history_round.prompt), config=named(snapshot),
        version=chatkeep_version(), request=digest,
        keep_closed_tool_turns=history_round.keep_closed_tool_turns,
        redacted=vault is not None)
    return history_round._repository.record_manifest(
        session.id, prepared.row.tenant, prepared.last_seq, manifest.encode(), texts,
        reservation=reservation)


def _memories(recalled: Sequence[Any], named: Any) -> tuple[int | str, ...]:
    """Each recalled memory as a manifest names it: a stored memory by its id, any other
    text (a literal one given to ``build_history``) by its digest."""
    out: list[int | str] = []
    for memory in recalled:
        memory_id = getattr(memory, "id", None)
        if isinstance(memory_id, int) and not isinstance(memory_id, bool):
            out.append(memory_id)
        else:
            out.append(named(memory if isinstance(memory, str) else memory.content))
    return tuple(out)
