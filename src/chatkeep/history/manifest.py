"""The manifest of a built request: what the store alone rebuilds it from. No I/O.

Every request a :class:`~chatkeep.history.round.HistoryRound` lets leave records one
(``chat_replay_manifests``): the summary version and watermark it replayed, the seqs it
read, the recalled memories (a memory row never changes: a new fact supersedes it with a
new row, so its id is its version), the size of the placeholder vault (a vault only grows,
so its first entries are the vault as it stood), digests of the system prompt and of the
chat config (their texts kept once per distinct value per session), the wire format, the
chatkeep version, and the SHA-256 of the serialised request. It holds no personal
content: ids, seqs, counts and digests.

Encoded as a compact JSON array, ASCII, about 150-250 bytes
(``tests/history/test_replay.py`` holds a recorded corpus to 300).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from chatkeep.config import ChatConfig
from chatkeep.errors import InvalidArgument
from chatkeep.tokens import TokenCounter

__all__ = ["FORMAT_CODES", "Manifest", "changes", "config_from_snapshot", "config_snapshot",
           "request_digest", "text_digest"]

FORMAT_CODES = ("openai_chat", "openai_responses", "anthropic_messages")
"""The wire formats, by their code in an encoded manifest (its position)."""
_ENCODING = 1
_CLOSED_TOOL_TURNS, _REDACTED = 1, 2


@functools.cache
def chatkeep_version() -> str:
    """This chatkeep's version (what a manifest records)."""
    try:
        return metadata.version("chatkeep")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree, not installed
        return "0"


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one built request was made from (see the module docstring)."""

    format: str
    """The wire format (``openai_chat``, ``openai_responses``, ``anthropic_messages``)."""
    summary_version: int
    """The session's ``summary_version`` the request was planned on."""
    watermark: int
    """The summary's watermark: messages after it replayed, those at or below it folded."""
    last_seq: int
    """The newest message the request read (the replay read ``watermark+1..last_seq``)."""
    messages: int
    """How many messages it read (pinned instructions included)."""
    vault: int
    """Entries in the session's placeholder vault once the request's were stored."""
    memories: tuple[int | str, ...]
    """The recalled memories in order: a memory's id, or the digest of a literal text."""
    system: str
    """Digest of the system prompt (:func:`text_digest`)."""
    config: str
    """Digest of the config snapshot (:func:`config_snapshot`)."""
    version: str
    """The chatkeep version that built it."""
    request: str
    """SHA-256 (hex) of the serialised request (:func:`request_digest`)."""
    keep_closed_tool_turns: bool = False
    """Closed turns' plumbing replayed as recorded (a framework's own semantics)."""
    redacted: bool = False
    """The session redacted: the request went out through its placeholder vault."""

    def encode(self) -> str:
        """The compact form stored in ``chat_replay_manifests.manifest``."""
        flags = (_CLOSED_TOOL_TURNS if self.keep_closed_tool_turns else 0) | \
            (_REDACTED if self.redacted else 0)
        digest = base64.urlsafe_b64encode(bytes.fromhex(self.request)).decode().rstrip("=")
        item = [_ENCODING, FORMAT_CODES.index(self.format), flags, self.summary_version,
                self.watermark, self.last_seq, self.messages, self.vault,
                list(self.memories), self.system, self.config, self.version, digest]
        return json.dumps(item, separators=(",", ":"), ensure_ascii=True)

    @classmethod
    def decode(cls, text: str) -> Manifest:
        """The manifest ``text`` encodes; ``InvalidArgument`` when it is not one."""
        try:
            (encoding, code, flags, version, watermark, last_seq, messages, vault, memories,
             system, config, made_by, digest) = json.loads(text)
            if encoding != _ENCODING:
                raise InvalidArgument(f"not a replay manifest: encoding {encoding}")
            request = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
            return cls(FORMAT_CODES[code], int(version), int(watermark), int(last_seq),
                       int(messages), int(vault),
                       tuple(m if isinstance(m, str) else int(m) for m in memories),
                       str(system), str(config), str(made_by), request,
                       bool(flags & _CLOSED_TOOL_TURNS), bool(flags & _REDACTED))
        except (ValueError, TypeError, IndexError) as exc:
            raise InvalidArgument(f"not a replay manifest: {exc}") from None


def text_digest(text: str) -> str:
    """A text's digest as manifests name it: 16 bytes of its SHA-256, base64url."""
    raw = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16]
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def request_digest(messages: Sequence[Any], system: str | None = None) -> str:
    """SHA-256 (hex) of a request as chatkeep serialises it: canonical JSON (keys sorted,
    no spaces, UTF-8) of ``{"messages": [...], "system": ...}`` (``system``: Anthropic's
    top-level system text, else ``null``)."""
    body = json.dumps({"messages": list(messages), "system": system}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False, default=_refuse)
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _refuse(value: Any) -> Any:
    raise InvalidArgument(f"a request holds a {type(value).__name__}, which JSON cannot "
                          "hold")


def config_snapshot(config: ChatConfig, counter: TokenCounter, privacy: str) -> str:
    """The config a request was planned under, as stored once per distinct value: the
    chat section (what plans the history), the token counter's class and a digest of the
    privacy settings (``privacy``; never the encryption key)."""
    return json.dumps({"chat": dataclasses.asdict(config),
                       "counter": type(counter).__qualname__, "privacy": privacy},
                      sort_keys=True, separators=(",", ":"))


def config_from_snapshot(text: str) -> tuple[ChatConfig, str, str]:
    """The chat config, the counter's class name and the privacy digest of a snapshot."""
    try:
        item = json.loads(text)
        known = {field.name for field in dataclasses.fields(ChatConfig)}
        chat = ChatConfig(**{k: v for k, v in item["chat"].items() if k in known})
        return chat, str(item["counter"]), str(item["privacy"])
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidArgument(f"not a config snapshot: {exc}") from None


def changes(before: Manifest | None, after: Manifest) -> list[str]:
    """What changed from one turn's manifest to the next, as people read it ("folded seq
    14-48 into summary v7", "memory #12 recalled"); ``before`` ``None``: the first turn."""
    if before is None:
        return ["the first recorded turn"]
    out: list[str] = []
    if after.watermark > before.watermark:
        out.append(f"folded seq {before.watermark + 1}-{after.watermark} into summary "
                   f"v{after.summary_version}")
    elif after.watermark < before.watermark:
        out.append(f"summary dropped (watermark {before.watermark} -> {after.watermark})")
    earlier = set(before.memories)
    now = set(after.memories)
    out += [f"memory #{m} recalled" if isinstance(m, int) else "a given memory text added"
            for m in after.memories if m not in earlier]
    out += [f"memory #{m} no longer recalled" if isinstance(m, int)
            else "a given memory text dropped" for m in before.memories if m not in now]
    if after.vault > before.vault:
        out.append(f"{after.vault - before.vault} new value(s) redacted")
    for label, old, new in (("system prompt", before.system, after.system),
                            ("config", before.config, after.config),
                            ("format", before.format, after.format),
                            ("chatkeep version", before.version, after.version)):
        if old != new:
            out.append(f"{label} changed" + (f" ({old} -> {new})" if label in (
                "format", "chatkeep version") else ""))
    return out
