"""A real HTTP server on 127.0.0.1 that speaks ``POST /v1/chat/completions``.

It records every request body and answers from a script (a queue of ``Reply``
values) or a responder function, so tests exercise the real ``openai`` SDK:
serialisation, HTTP status handling, timeouts and retries included. It is a
fake of the hosted model only; nothing in chatkeep knows it is a fake.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text, an HTTP error, a raw (garbage) body, after a delay."""

    text: str | None = None
    status: int = 200
    raw_body: bytes | None = None
    delay: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tool_calls: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def ok(cls, text: str, *, prompt_tokens: int | None = None,
           completion_tokens: int | None = None, delay: float = 0.0) -> Reply:
        """A normal completion; token counts default to 4-chars-per-token estimates."""
        return cls(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   delay=delay)

    @classmethod
    def calls(cls, *calls: tuple[str, str, str], text: str | None = None,
              prompt_tokens: int | None = None, completion_tokens: int | None = None) -> Reply:
        """An assistant turn requesting tools: ``(call_id, function_name, arguments_json)``."""
        return cls(text=text, tool_calls=tuple(calls), prompt_tokens=prompt_tokens,
                   completion_tokens=completion_tokens)

    @classmethod
    def json(cls, payload: Any, **kwargs: Any) -> Reply:
        """A completion whose text is ``payload`` as JSON (structured-output answers)."""
        return cls.ok(json.dumps(payload), **kwargs)

    @classmethod
    def error(cls, status: int = 500, message: str = "scripted failure") -> Reply:
        """An OpenAI-style error body with ``status``."""
        body = json.dumps({"error": {"message": message, "type": "server_error"}}).encode()
        return cls(status=status, raw_body=body)

    @classmethod
    def garbage(cls) -> Reply:
        """HTTP 200 with a body that is not a chat completion."""
        return cls(raw_body=b'{"unexpected": true}')

    @classmethod
    def hang(cls, seconds: float) -> Reply:
        """Answer only after ``seconds`` (longer than the client timeout = a timeout)."""
        return cls(text="too late", delay=seconds)


Responder = Callable[[dict[str, Any]], Reply]


class FakeOpenAIServer:
    """``with FakeOpenAIServer() as server: OpenAI(base_url=server.base_url, api_key="x")``."""

    def __init__(self, responder: Responder | None = None, model: str = "fake-model") -> None:
        self.responder = responder
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what to give ``openai.OpenAI(base_url=...)``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *replies: Reply) -> FakeOpenAIServer:
        """Queue replies; each request takes the next one (then the responder, then echo)."""
        with self._lock:
            self._script.extend(replies)
        return self

    def bodies(self) -> list[str]:
        """Every recorded request body as text (for 'no raw PII left the process' checks)."""
        with self._lock:
            return [raw.decode("utf-8") for raw in self.raw_requests]

    def start(self) -> FakeOpenAIServer:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(body)
        return Reply.ok("ok")

    def _completion(self, reply: Reply, body: dict[str, Any]) -> bytes:
        prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        text = reply.text or ""
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in reply.tool_calls]
        payload = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": {
                "prompt_tokens": reply.prompt_tokens if reply.prompt_tokens is not None
                else -(-prompt_chars // 4),
                "completion_tokens": reply.completion_tokens
                if reply.completion_tokens is not None else -(-len(text) // 4),
                "total_tokens": 0,
            },
        }
        usage = payload["usage"]
        assert isinstance(usage, dict)
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return json.dumps(payload).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                return

            def do_POST(self) -> None:
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, b'{"error": {"message": "invalid JSON"}}')
                    return
                with server._lock:
                    server.requests.append(body)
                    server.raw_requests.append(raw)
                reply = server._next_reply(body)
                if reply.delay:
                    time.sleep(reply.delay)
                data = reply.raw_body if reply.raw_body is not None else \
                    server._completion(reply, body)
                # A client that gave up (timeout) has closed the socket: nothing to answer.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(reply.status, data)

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
