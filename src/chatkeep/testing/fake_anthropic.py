"""A real HTTP server on 127.0.0.1 that speaks the Anthropic ``POST /v1/messages`` API.

The twin of :class:`~chatkeep.testing.fake_openai.FakeOpenAIServer` for Anthropic: the
same script of :class:`~chatkeep.testing.fake_openai.Reply` values, responder, request
record and strictness (400 ``invalid_request_error`` for what the hosted API rejects, see
:func:`~chatkeep.testing.wire_rules.check_anthropic_messages`), so tests drive the real
``anthropic`` SDK. It speaks JSON over HTTP only: the SDK is not needed to run it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from typing import Any

from chatkeep.testing import wire_rules
from chatkeep.testing.fake_openai import (
    Answer,
    FakeServerBase,
    Reply,
    Responder,
    estimate_tokens,
    pieces,
    sse,
)

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 529: "overloaded_error"}


class FakeAnthropicServer(FakeServerBase):
    """``with FakeAnthropicServer() as server:
    anthropic.Anthropic(base_url=server.base_url, api_key="x")``.

    Answers ``POST /v1/messages`` with a Messages API ``Message`` (or its event stream when
    ``stream: true``). A :class:`Reply`'s ``thinking`` becomes a signed ``thinking`` block,
    its text a ``text`` block, its tool calls ``tool_use`` blocks (arguments JSON parsed
    into ``input``). Scripted error replies are re-shaped into Anthropic error bodies.
    """

    default_model = "fake-claude"
    paths = ("/v1/messages",)

    def __init__(self, responder: Responder | None = None, model: str = "fake-claude",
                 strict: bool = True) -> None:
        super().__init__(responder, model, strict)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: what to give ``anthropic.Anthropic(base_url=...)``
        (the SDK appends ``/v1/messages`` itself)."""
        return self.origin

    def _error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        kind = _ERROR_TYPES.get(status, "api_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()

    def _route(self, path: str, body: dict[str, Any]) -> Answer | None:
        if self.strict:
            errors = wire_rules.check_anthropic_messages(body)
            if errors:
                self._reject(errors[0])
                return Answer(400, self._error_body(400, errors[0]))
        reply = self._next_reply(body)
        if reply.raw_body is not None:
            return Answer(reply.status, self._reshape_error(reply), delay=reply.delay)
        message = self._message(reply, body)
        if body.get("stream"):
            return Answer(reply.status, events=tuple(self._events(message)), delay=reply.delay)
        return Answer(reply.status, json.dumps(message).encode(), delay=reply.delay)

    def _reshape_error(self, reply: Reply) -> bytes:
        raw = reply.raw_body or b""
        if reply.status < 400:
            return raw
        try:
            error = json.loads(raw).get("error")
        except (ValueError, AttributeError):
            return raw
        if not isinstance(error, dict) or "message" not in error:
            return raw
        return self._error_body(reply.status, str(error["message"]))

    def _message(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.thinking is not None:
            content.append({"type": "thinking", "thinking": reply.thinking,
                            "signature": wire_rules.sign(reply.thinking)})
        if reply.text is not None and (reply.text or not reply.tool_calls):
            content.append({"type": "text", "text": reply.text, "citations": None})
        for cid, name, args in reply.tool_calls:
            content.append({"type": "tool_use", "id": cid, "name": name,
                            "input": json.loads(args) if args else {}})
        prompt_chars = len(json.dumps(body.get("messages"))) + len(json.dumps(body.get("system")
                                                                              or ""))
        output_chars = len(reply.text or "") + len(reply.thinking or "") + sum(
            len(a) for _, _, a in reply.tool_calls)
        return {
            "id": f"msg_{secrets.token_hex(12)}", "type": "message", "role": "assistant",
            "model": body.get("model") or self.model, "content": content,
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.prompt_tokens if reply.prompt_tokens is not None
                else estimate_tokens(prompt_chars),
                "output_tokens": reply.completion_tokens if reply.completion_tokens is not None
                else estimate_tokens(output_chars),
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            },
        }

    def _events(self, message: dict[str, Any]) -> Iterable[bytes]:
        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {**usage, "output_tokens": 1}}
        yield sse({"type": "message_start", "message": start}, "message_start")
        for index, block in enumerate(message["content"]):
            kind = block["type"]
            empty = {"text": {"type": "text", "text": ""},
                     "thinking": {"type": "thinking", "thinking": "", "signature": ""},
                     }.get(kind, {**block, "input": {}})
            yield sse({"type": "content_block_start", "index": index, "content_block": empty},
                      "content_block_start")
            if kind == "text":
                deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
            elif kind == "thinking":
                deltas = [{"type": "thinking_delta", "thinking": p}
                          for p in pieces(block["thinking"])]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            else:
                deltas = [{"type": "input_json_delta", "partial_json": p}
                          for p in pieces(json.dumps(block["input"]))]
            for delta in deltas:
                yield sse({"type": "content_block_delta", "index": index, "delta": delta},
                          "content_block_delta")
            yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        yield sse({"type": "message_delta",
                   "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                   "usage": {"output_tokens": usage["output_tokens"]}}, "message_delta")
        yield sse({"type": "message_stop"}, "message_stop")
