"""``keep.replay(session, turn=N)``: a past request rebuilt from the store alone.

The turn's manifest (:mod:`chatkeep.history.manifest`) names what the request was made
of; the store still holds each part: the summary at its version, the messages of its seq
range as they stood then, the recalled memories (rows never edited), the placeholder
vault's first entries, the system prompt and the chat config as they were. The replay
plans that again with the planner every request uses, renders it in the recorded format
through a read-only egress (nothing is stored, no model is called) and compares its
SHA-256 with the recorded one.

What an erasure removed since (a deleted message, an erased memory, a summary version
dropped with the messages it folded, the vault) is marked in :attr:`Replay.erased`, the
request rebuilt from what is left: the hashes then differ, and the replay says why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from chatkeep.errors import InvalidArgument, TurnNotFound, TurnNotRecorded
from chatkeep.formats import History, HistoryInfo, get_format
from chatkeep.history.manifest import (
    Manifest,
    chatkeep_version,
    config_from_snapshot,
    config_snapshot,
)
from chatkeep.history.plan import plan_history
from chatkeep.history.recording import body_digest, privacy_digest
from chatkeep.history.round import scrubbed
from chatkeep.privacy.egress import OPEN, Egress, SessionEgress
from chatkeep.privacy.vault import PlaceholderVault, unseal
from chatkeep.sessions import ChatSession
from chatkeep.store.replay import ManifestRow, PastState, read_manifest, read_past

if TYPE_CHECKING:
    from chatkeep.history.compressor import HistoryCompressor

__all__ = ["Replay", "replay"]


@dataclass(frozen=True, slots=True)
class Replay:
    """A past request rebuilt from the store, and whether it is the one that left."""

    session_id: str
    turn: int
    """The turn (1, 2, ... per session: each request chatkeep built for it)."""
    recorded_at: datetime
    manifest: Manifest
    """What the request was made of, as recorded."""
    request: History[Any]
    """The request rebuilt (in ``manifest.format``; what is erased left out)."""
    recorded_sha256: str
    rebuilt_sha256: str
    erased: tuple[str, ...] = ()
    """What an erasure removed since, each a phrase ("memory #12 erased"): the rebuild
    then lacks it and cannot match."""
    changed: tuple[str, ...] = ()
    """What differs in this process from when the request was built (the config, the
    token counter, the privacy settings, the chatkeep version): the replay used what was
    recorded where it could; a mismatch may come from these."""

    @property
    def match(self) -> bool:
        """The rebuilt request is byte for byte the recorded one (same SHA-256)."""
        return self.rebuilt_sha256 == self.recorded_sha256


def replay(compressor: HistoryCompressor, session: ChatSession, turn: int) -> Replay:
    """Rebuild turn ``turn`` of ``session`` (``-1``: the newest) from the store and check
    it against its recorded hash. ``TurnNotFound`` when the session has no such turn,
    ``TurnNotRecorded`` for the requests built before the database had replay."""
    if isinstance(turn, bool) or not isinstance(turn, int) or turn == 0:
        raise InvalidArgument(f"turn must be a non-zero whole number (1 is the first, -1 the "
                              f"newest), got {turn!r}")
    repository = compressor._repository_for(session)
    row = read_manifest(repository.engine, session.id, turn)
    if row is None:
        raise TurnNotFound(f"session {session.id} has no turn {turn}")
    if row.manifest is None:
        raise TurnNotRecorded(f"session {session.id}: turn {row.turn} stands for the requests "
                              f"built before replay existed (through seq {row.last_seq}); "
                              "they have no manifest")
    manifest = Manifest.decode(row.manifest)
    past = read_past(
        repository.engine, session.id, session.tenant, summary_version=manifest.summary_version,
        watermark=manifest.watermark, last_seq=manifest.last_seq, at=row.created_at,
        digests=[manifest.system, manifest.config,
                 *(m for m in manifest.memories if isinstance(m, str))],
        memory_ids=[m for m in manifest.memories if isinstance(m, int)])
    session.adopt_row(past.row)
    return _rebuild(compressor, session, row, manifest, past)


def _rebuild(compressor: HistoryCompressor, session: ChatSession, row: ManifestRow,
             manifest: Manifest, past: PastState) -> Replay:
    from chatkeep.history.compressor import _with_memories

    erased = _erased(manifest, past)
    changed: list[str] = []
    config, counter_name, privacy = compressor.config, "", ""
    if manifest.config in past.texts:
        config, counter_name, privacy = config_from_snapshot(past.texts[manifest.config])
    else:
        changed.append("the config snapshot is gone: replayed with this keep's config")
    counter = compressor.counter
    if counter_name and counter_name != type(counter).__qualname__:
        changed.append(f"the token counter was {counter_name}, "
                       f"this keep's is {type(counter).__qualname__}")
    if privacy and privacy != privacy_digest(compressor.outbound_filter):
        changed.append("the privacy settings differ from the recorded ones")
    if manifest.version != chatkeep_version():
        changed.append(f"recorded by chatkeep {manifest.version}, replayed by "
                       f"{chatkeep_version()}")
    if config_snapshot(compressor.config, counter, privacy_digest(
            compressor.outbound_filter)) != past.texts.get(manifest.config, ""):
        changed.append("this keep's chat config differs (replayed with the recorded one)")
    texts = [_memory_text(m, past) for m in manifest.memories]
    egress = _egress(compressor, session, manifest, past, erased)
    system = _with_memories(past.texts.get(manifest.system, ""),
                            [t for t in texts if t is not None])
    summary = compressor._model_summary(session, past.summary, egress)
    plan = plan_history(
        system_text=egress(system), pinned_before=past.pinned,
        summary=(summary.render() or None) if summary else None, messages=past.messages,
        config=config, counter=counter, redact=egress, format=manifest.format,
        allow_fold=False, keep_closed_tool_turns=manifest.keep_closed_tool_turns)
    outgoing = dataclasses.replace(plan.outgoing, summary_role=config.summary_role)
    info = HistoryInfo(plan.tokens, config.max_history_tokens,
                       over_budget_reason=plan.over_budget_reason, clipped=plan.clipped,
                       format=manifest.format, preview=True)
    request = scrubbed(get_format(manifest.format).to_wire(outgoing, info), egress, session)
    return Replay(session.id, row.turn, row.created_at, manifest, request, manifest.request,
                  body_digest(request), tuple(erased), tuple(dict.fromkeys(changed)))


def _memory_text(ref: int | str, past: PastState) -> str | None:
    if isinstance(ref, int):
        memory = past.memories.get(ref)
        return None if memory is None else memory.content
    return past.texts.get(ref)


def _erased(manifest: Manifest, past: PastState) -> list[str]:
    """What the store no longer holds of the request's parts."""
    out: list[str] = []
    read = len(past.pinned) + len(past.messages)
    if read < manifest.messages:
        out.append(f"{manifest.messages - read} message(s) of seq "
                   f"{manifest.watermark + 1}-{manifest.last_seq} (or pinned before) erased")
    if not past.summary_found:
        out.append(f"summary v{manifest.summary_version} (through seq {manifest.watermark}) "
                   "erased")
    for ref in manifest.memories:
        if isinstance(ref, int) and ref not in past.memories:
            out.append(f"memory #{ref} erased")
        elif isinstance(ref, str) and ref not in past.texts:
            out.append("a memory text given to build_history erased")
    if manifest.system not in past.texts:
        out.append("the system prompt erased")
    return out


def _egress(compressor: HistoryCompressor, session: ChatSession, manifest: Manifest,
            past: PastState, erased: list[str]) -> Egress:
    """A read-only egress with the session's vault as it stood (its first entries) and the
    values the recalled memories carried: nothing it allocates is ever stored."""
    guard = compressor.outbound_filter
    if not manifest.redacted:
        return OPEN
    redactor = getattr(guard, "redactor", None)
    key = getattr(getattr(guard, "config", None), "encryption_key", None)
    if redactor is None:
        erased.append("redaction: this keep has no privacy guard to redact with")
        return OPEN
    blob = session.row.pii_vault
    stored = unseal(blob, key) if blob else PlaceholderVault()
    if len(stored) < manifest.vault:
        erased.append(f"placeholder vault ({manifest.vault - len(stored)} value(s)) erased")
    vault = PlaceholderVault()
    for entity_type, canonical, value in stored.entries()[:manifest.vault]:
        vault.placeholder_for(entity_type, value, canonical)
    carried = [unseal(m.sealed_pii, key) for m in past.memories.values() if m.sealed_pii]
    return SessionEgress(redactor, vault, -1, store=lambda _version, _vault: True,
                         load=lambda: (vault, -1), carried=carried)
