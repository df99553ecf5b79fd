"""A model request's text, through one egress body. No I/O: the caller passes the scrub.

Every string a Pydantic AI request carries to the model (the instructions, and in each
message the system and user prompts, tool results and retry feedback, the model's text,
thinking and tool arguments, summaries, provider tools' arguments and results,
instruction records and deltas, speech transcripts, and each file's URL, name, vendor
options and, for a text-like file, its text) is gathered into one JSON body, scrubbed in
one pass by the session's egress (so a value detected anywhere in the request is
redacted everywhere in it), and put back into copies of the messages: the run's own
messages are never changed.

Files, in user prompts, tool results and model output alike:

* a text-like file (``text/*``, JSON, XML, YAML, TOML: what the model adapters inline as
  text) is scrubbed as text and goes out as a ``BinaryContent`` of its scrubbed text. One
  given by URL is read from ``files`` (the caller downloads it first: :mod:`._files`);
  until then it is *unread* and goes out as a note, never as a URL the adapter would
  download and inline unscrubbed;
* a file URL holding a detected value goes out as a note with the scrubbed URL instead of
  the file (a URL with a placeholder in it names no file, and the request stays valid);
* the bytes of an image, audio, video or PDF cannot be redacted: they are sent as they are,
  and so is the id of a file uploaded to the provider (its content is already there).

A signed part (thinking with a signature, a provider's compaction) cannot change without
breaking its signature: when its text would change it is withheld.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic_core
from pydantic_ai._utils import is_text_like_media_type  # what the model adapters inline
from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    BinaryContent,
    CompactionPart,
    FilePart,
    FileUrl,
    InstructionBaselinePart,
    InstructionDeltaPart,
    InstructionPart,
    ModelMessage,
    ModelRequest,
    RetryFeedbackPart,
    RetryPromptPart,
    SpeechPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    UploadedFile,
    UserPromptPart,
)

Scrub = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Scrubbed:
    """The request as it may leave."""

    messages: list[ModelMessage]
    instructions: list[str]
    withheld: int
    unread: list[FileUrl]
    """Text-like files given by URL that ``files`` did not hold (sent as a note)."""


def scrub_request(messages: Sequence[ModelMessage], instructions: Sequence[str],
                  scrub: Scrub, files: Mapping[str, str] | None = None) -> Scrubbed:
    """``messages`` and ``instructions`` with every string scrubbed in one body.
    ``files``: the text of text-like files given by URL, by URL."""
    reader = _Files(files or {})
    slots = [[_slot(part, reader) for part in message.parts] for message in messages]
    body = {"instructions": list(instructions),
            "messages": [{"instructions": _instructions(message), "parts": parts}
                         for message, parts in zip(messages, slots, strict=True)]}
    out = scrub(body)
    withheld = 0
    result: list[ModelMessage] = []
    for message, before, after in zip(messages, slots, out["messages"], strict=True):
        parts: list[Any] = []
        changed = False
        for part, old, new in zip(message.parts, before, after["parts"], strict=True):
            if old is None or (new == old and not reader.replaces(part)):
                parts.append(part)
                continue
            if _signed(part):
                withheld += 1  # its text would change: the signature would no longer match
                changed = True
                continue
            parts.append(_apply(part, old, new, reader))
            changed = True
        text = after["instructions"]
        if isinstance(message, ModelRequest):
            if changed or text != message.instructions:
                message = dataclasses.replace(message, parts=parts, instructions=text)
        elif changed:
            message = dataclasses.replace(message, parts=parts)
        result.append(message)
    return Scrubbed(result, list(out["instructions"]), withheld, reader.unread)


def _instructions(message: ModelMessage) -> str | None:
    return message.instructions if isinstance(message, ModelRequest) else None


def _signed(part: Any) -> bool:
    if isinstance(part, ThinkingPart):
        return bool(part.signature or part.id or part.provider_details)
    if isinstance(part, CompactionPart):
        return bool(part.provider_name or part.id or part.provider_details)
    return False


def _slot(part: Any, files: _Files) -> Any:
    """The strings of ``part`` that go to the model, as JSON (``None``: none)."""
    if isinstance(part, SystemPromptPart | TextPart | ThinkingPart):
        return {"text": part.content}
    if isinstance(part, CompactionPart):
        return {"text": part.content} if part.content is not None else None
    if isinstance(part, UserPromptPart):
        return {"content": _content(part.content, files)}
    if isinstance(part, BaseToolCallPart):
        return {"args": _arguments(part.args)}
    if isinstance(part, BaseToolReturnPart):
        return {"content": _content(part.content, files)}
    if isinstance(part, RetryFeedbackPart | RetryPromptPart):
        return {"json": _json(part.content)}
    if isinstance(part, FilePart):
        return {"content": _content(part.content, files)}
    if isinstance(part, InstructionDeltaPart):
        return {"text": part.content} if part.content is not None else None
    if isinstance(part, InstructionBaselinePart):
        return {"instructions": [item.content if isinstance(item, InstructionPart) else None
                                 for item in part.instructions]}
    if isinstance(part, SpeechPart):
        return {"text": part.transcript} if part.transcript is not None else None
    return None


def _apply(part: Any, old: Any, new: Any, files: _Files) -> Any:
    """``part`` carrying the scrubbed strings of its slot (``old``: as gathered)."""
    if isinstance(part, SpeechPart):
        return dataclasses.replace(part, transcript=new["text"])
    if isinstance(part, SystemPromptPart | TextPart | ThinkingPart | CompactionPart
                  | InstructionDeltaPart):
        return dataclasses.replace(part, content=new["text"])
    if isinstance(part, UserPromptPart | BaseToolReturnPart | FilePart):
        return dataclasses.replace(part, content=_rebuilt(part.content, old["content"],
                                                          new["content"], files))
    if isinstance(part, RetryFeedbackPart | RetryPromptPart):
        return dataclasses.replace(part, content=new["json"])
    if isinstance(part, InstructionBaselinePart):
        return dataclasses.replace(part, instructions=[
            dataclasses.replace(item, content=text) if isinstance(item, InstructionPart)
            and isinstance(text, str) else item
            for item, text in zip(part.instructions, new["instructions"], strict=True)])
    args = new["args"]
    if "json" in args:
        return dataclasses.replace(part, args=json.dumps(args["json"], ensure_ascii=False))
    return dataclasses.replace(part, args=args["text"] if "text" in args else args["value"])


# -- content: text, JSON values and files, alone or in a list --------------------------------


def _is_file(value: Any) -> bool:
    return isinstance(value, FileUrl | BinaryContent | UploadedFile)


def _content(value: Any, files: _Files) -> Any:
    """A part's content as JSON: its text, its JSON value, its files' strings."""
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, TextContent):
        return {"text": value.content}
    if _is_file(value):
        return {"file": files.slot(value)}
    if isinstance(value, list | tuple):
        return {"items": [_content(item, files) for item in value]}
    return {"json": _json(value)}


def _rebuilt(value: Any, old: Any, new: Any, files: _Files) -> Any:
    """``value`` carrying the scrubbed strings of ``new`` (see :func:`_content`); an item
    whose strings did not change stays as it is (a cache point, an uploaded file)."""
    if "items" in new:
        return [_rebuilt(item, before, after, files) for item, before, after
                in zip(value, old["items"], new["items"], strict=True)]
    if new == old and not (isinstance(value, FileUrl) and files.text_like(value)):
        return value
    if "file" in new:
        return files.rebuilt(value, new["file"])
    if isinstance(value, TextContent):
        return dataclasses.replace(value, content=new["text"])
    return new["text"] if "text" in new else new["json"]


class _Files:
    """The strings of the files a request carries, and the files rebuilt from them."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = texts
        self.unread: list[FileUrl] = []
        self._seen: set[str] = set()

    def text_of(self, item: Any) -> str | None:
        """The text of a text-like file (``None``: not text-like, not read yet, or a file
        uploaded to the provider, which only its id names)."""
        if isinstance(item, UploadedFile) or not self.text_like(item):
            return None
        if isinstance(item, BinaryContent):
            return item.data.decode("utf-8", "replace")
        text = self.texts.get(item.url)
        if text is None and item.url not in self._seen:
            self._seen.add(item.url)
            self.unread.append(item)
        return text

    def slot(self, item: Any) -> dict[str, Any]:
        slot: dict[str, Any] = {"identifier": item.identifier,
                                "vendor": _json(item.vendor_metadata)}
        if isinstance(item, FileUrl):
            slot["url"] = item.url
        text = self.text_of(item)
        if text is not None:
            slot["text"] = text
        return slot

    @staticmethod
    def text_like(item: Any) -> bool:
        """Whether the model adapters inline ``item``'s content as text."""
        return is_text_like_media_type(_media_type(item))

    def replaces(self, part: Any) -> bool:
        """Whether ``part`` holds a file that never goes out as it is: a text-like file
        given by URL (read here, or unread)."""
        content = getattr(part, "content", None)
        items = content if isinstance(content, list | tuple) else [content]
        return any(isinstance(item, FileUrl) and self.text_like(item) for item in items)

    def rebuilt(self, item: Any, new: dict[str, Any]) -> Any:
        vendor = new["vendor"] if isinstance(new["vendor"], dict) else item.vendor_metadata
        text_like = is_text_like_media_type(_media_type(item))
        if isinstance(item, FileUrl) and (new["url"] != item.url or (
                text_like and "text" not in new)):
            what = "unread" if "text" not in new and new["url"] == item.url else "withheld"
            return f"[{getattr(item, 'kind', 'file')} {what}: {new['url']}]"
        if text_like and "text" in new:
            return BinaryContent(new["text"].encode("utf-8"), media_type=_media_type(item),
                                 identifier=new["identifier"], vendor_metadata=vendor)
        if new["identifier"] == item.identifier and vendor == item.vendor_metadata:
            return item
        rebuilt = copy.copy(item)  # the bytes, URL and type as they are; its strings scrubbed
        object.__setattr__(rebuilt, "_identifier", new["identifier"])
        object.__setattr__(rebuilt, "vendor_metadata", vendor)
        return rebuilt


def _media_type(item: Any) -> str:
    try:
        media_type = item.media_type
    except ValueError:  # a URL whose type cannot be inferred
        return ""
    return media_type if isinstance(media_type, str) else ""


def _arguments(args: Any) -> Any:
    """Tool arguments as JSON (text arguments parsed, so they stay valid once scrubbed)."""
    if isinstance(args, str):
        try:
            return {"json": json.loads(args)}
        except ValueError:
            return {"text": args}
    return {"value": _json(args)}


def _json(value: Any) -> Any:
    return pydantic_core.to_jsonable_python(value, fallback=str)
