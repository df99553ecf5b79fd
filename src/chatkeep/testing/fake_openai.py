"""A real HTTP server on 127.0.0.1 that speaks the OpenAI ``/v1/chat/completions``,
``/v1/responses`` and ``/v1/embeddings`` endpoints.

It records every request body and answers from a script (a queue of ``Reply`` values) or
a responder function, so tests exercise the real ``openai`` SDK: serialisation, HTTP
status handling, streaming, timeouts and retries included. With ``strict`` (the default)
it also rejects, with the hosted API's HTTP 400, the bodies the hosted API rejects (see
:mod:`chatkeep.testing.wire_rules`): broken tool-call plumbing fails here as in
production. It is a fake of the hosted model only; nothing in chatkeep knows it is a fake.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import secrets
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from chatkeep.memory.embedders import Embedder, HashEmbedder
from chatkeep.testing import wire_rules

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text, tool calls, an HTTP error, a raw (garbage) body, after a
    delay. ``thinking`` is the reasoning a reasoning model shows first: a signed
    ``thinking`` block (Anthropic) or a ``reasoning`` item with sealed
    ``encrypted_content`` (Responses); Chat Completions ignores it."""

    text: str | None = None
    status: int = 200
    raw_body: bytes | None = None
    delay: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    thinking: str | None = None

    @classmethod
    def ok(cls, text: str, *, prompt_tokens: int | None = None,
           completion_tokens: int | None = None, delay: float = 0.0,
           thinking: str | None = None) -> Reply:
        """A normal completion; token counts default to 4-chars-per-token estimates."""
        return cls(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   delay=delay, thinking=thinking)

    @classmethod
    def calls(cls, *calls: tuple[str, str, str], text: str | None = None,
              prompt_tokens: int | None = None, completion_tokens: int | None = None,
              thinking: str | None = None) -> Reply:
        """An assistant turn requesting tools: ``(call_id, function_name, arguments_json)``."""
        return cls(text=text, tool_calls=tuple(calls), prompt_tokens=prompt_tokens,
                   completion_tokens=completion_tokens, thinking=thinking)

    @classmethod
    def json(cls, payload: Any, **kwargs: Any) -> Reply:
        """A completion whose text is ``payload`` as JSON (structured-output answers)."""
        return cls.ok(json.dumps(payload), **kwargs)

    @classmethod
    def error(cls, status: int = 500, message: str = "scripted failure") -> Reply:
        """An OpenAI-style error body with ``status`` (the Anthropic fake re-shapes it)."""
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


@dataclass(frozen=True)
class Answer:
    """What a fake server sends back for one request: a JSON body, or (``events``) a
    ``text/event-stream`` written chunk by chunk."""

    status: int
    body: bytes = b""
    events: tuple[bytes, ...] | None = None
    delay: float = 0.0


def estimate_tokens(chars: int) -> int:
    """The fakes' token estimate: 4 characters per token, rounded up."""
    return -(-chars // 4)


class FakeServerBase:
    """What the fake LLM servers share: a threaded HTTP server on 127.0.0.1, a script of
    :class:`Reply` values, a fallback responder, and a record of every request (parsed in
    ``requests``, bytes in ``raw_requests``, rejection messages in ``rejected``).
    Subclasses route ``POST`` paths to answers."""

    default_model = "fake-model"
    #: Path endings this server answers; other paths get a 404 and are not recorded.
    paths: tuple[str, ...] = ()

    def __init__(self, responder: Responder | None = None, model: str | None = None,
                 strict: bool = True) -> None:
        self.responder = responder
        self.model = model or self.default_model
        self.strict = strict
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []
        self.rejected: list[str] = []
        self.trickle = 0.0
        """Seconds between the bytes of every JSON body sent (0: all at once): a server
        that is never silent for a whole read timeout, yet never done."""
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *replies: Reply) -> Self:
        """Queue replies; each accepted request takes the next one (then the responder,
        then ``Reply.ok("ok")``)."""
        with self._lock:
            self._script.extend(replies)
        return self

    def bodies(self) -> list[str]:
        """Every recorded request body as text (for 'no raw PII left the process' checks)."""
        with self._lock:
            return [raw.decode("utf-8") for raw in self.raw_requests]

    def start(self) -> Self:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Self:
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

    def _reject(self, message: str) -> None:
        with self._lock:
            self.rejected.append(message)

    # Subclass hooks --------------------------------------------------------------------

    def _route(self, path: str, body: dict[str, Any]) -> Answer | None:
        """The answer for ``POST path`` (``None``: no such endpoint -> 404)."""
        raise NotImplementedError

    def _error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        """An error body in the provider's shape."""
        return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                     "param": param, "code": None}}).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                return

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not path.endswith(server.paths):
                    self._send(Answer(404, server._error_body(404, f"no route for {path}")))
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(Answer(400, server._error_body(400, "invalid JSON")))
                    return
                if not isinstance(body, dict):
                    self._send(Answer(400, server._error_body(400, "expected a JSON object")))
                    return
                with server._lock:
                    server.requests.append(body)
                    server.raw_requests.append(raw)
                try:
                    answer = server._route(path, body)
                except Exception as exc:  # a broken responder: answer, don't hang the client
                    _log.exception("fake server: answering %s failed", path)
                    answer = Answer(500, server._error_body(500, f"fake server error: {exc!r}"))
                if answer is None:
                    answer = Answer(404, server._error_body(404, f"no route for {path}"))
                if answer.delay:
                    time.sleep(answer.delay)
                # A client that gave up (timeout) has closed the socket: nothing to answer.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(answer)

            def _send(self, answer: Answer) -> None:
                self.send_response(answer.status)
                if answer.events is None:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    if not server.trickle:
                        self.wfile.write(answer.body)
                        return
                    for i in range(len(answer.body)):
                        self.wfile.write(answer.body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(server.trickle)
                    return
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in answer.events:
                    self.wfile.write(event)
                    self.wfile.flush()
                self.close_connection = True

        return Handler


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event carrying ``data`` as JSON (or verbatim if a string)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def pieces(text: str, count: int = 3) -> list[str]:
    """``text`` cut into about ``count`` non-empty pieces (stream deltas)."""
    if not text:
        return []
    size = max(1, -(-len(text) // count))
    return [text[i:i + size] for i in range(0, len(text), size)]


class FakeOpenAIServer(FakeServerBase):
    """``with FakeOpenAIServer() as server: OpenAI(base_url=server.base_url, api_key="x")``.

    Serves ``POST /v1/chat/completions`` (``stream: true`` included),
    ``POST /v1/responses`` (``previous_response_id`` included) and ``POST /v1/embeddings``
    (vectors from ``embedder``, a deterministic ``HashEmbedder`` unless given; float or
    base64; ``fail_embeddings(n)`` makes the next n answer an error). With ``strict`` it answers
    400 to bodies the hosted API rejects; the request is still recorded in ``requests`` and
    the message appended to ``rejected`` (one exception: an empty ``messages`` list is
    answered, for older tests that post ``messages=[]`` only to fetch a scripted reply).
    The responder gets the parsed body (for Responses, with ``previous_response_id``
    already expanded into ``input``).
    """

    paths = ("/chat/completions", "/responses", "/embeddings")

    def __init__(self, responder: Responder | None = None, model: str = "fake-model",
                 strict: bool = True, embedder: Embedder | None = None) -> None:
        super().__init__(responder, model, strict)
        self._responses: dict[str, list[dict[str, Any]]] = {}  # id -> input + output items
        self.embedder: Embedder = embedder or HashEmbedder()
        self.embedding_requests: list[dict[str, Any]] = []
        self._embedding_failures: deque[int] = deque()

    def fail_embeddings(self, count: int = 1, status: int = 500) -> Self:
        """Answer the next ``count`` embeddings requests with HTTP ``status``."""
        with self._lock:
            self._embedding_failures.extend([status] * count)
        return self

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what to give ``openai.OpenAI(base_url=...)``."""
        return f"{self.origin}/v1"

    def _route(self, path: str, body: dict[str, Any]) -> Answer | None:
        if path.endswith("/chat/completions"):
            return self._chat(body)
        if path.endswith("/responses"):
            return self._responses_endpoint(body)
        if path.endswith("/embeddings"):
            return self._embeddings(body)
        return None

    def _invalid(self, message: str, param: str | None) -> Answer:
        self._reject(message)
        return Answer(400, self._error_body(400, message, param))

    # /chat/completions ------------------------------------------------------------------

    def _chat(self, body: dict[str, Any]) -> Answer:
        if self.strict:
            errors = wire_rules.check_chat_completions(body)
            if errors:
                return self._invalid(errors[0], "messages")
        reply = self._next_reply(body)
        if reply.raw_body is not None:
            return Answer(reply.status, reply.raw_body, delay=reply.delay)
        if body.get("stream"):
            return Answer(reply.status, events=tuple(self._chunks(reply, body)),
                          delay=reply.delay)
        return Answer(reply.status, self._completion(reply, body), delay=reply.delay)

    def _usage(self, reply: Reply, body: dict[str, Any]) -> dict[str, int]:
        prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None \
            else estimate_tokens(prompt_chars)
        completion = reply.completion_tokens if reply.completion_tokens is not None \
            else estimate_tokens(len(reply.text or ""))
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def _completion(self, reply: Reply, body: dict[str, Any]) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in reply.tool_calls]
        payload = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": self._usage(reply, body),
        }
        return json.dumps(payload).encode()

    def _chunks(self, reply: Reply, body: dict[str, Any]) -> Iterable[bytes]:
        options = body.get("stream_options")
        with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        base = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model") or self.model,
                "system_fingerprint": None}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                            "finish_reason": finish}]}
            if with_usage:
                payload["usage"] = None
            return sse(payload)

        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in pieces(reply.text or ""):
            yield chunk({"content": piece})
        for index, (cid, name, args) in enumerate(reply.tool_calls):
            yield chunk({"tool_calls": [{"index": index, "id": cid, "type": "function",
                                         "function": {"name": name, "arguments": ""}}]})
            for piece in pieces(args):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
        if with_usage:
            yield sse({**base, "choices": [], "usage": self._usage(reply, body)})
        yield sse("[DONE]")

    # /embeddings ------------------------------------------------------------------------

    def _embeddings(self, body: dict[str, Any]) -> Answer:
        with self._lock:
            self.embedding_requests.append(body)
            failure = self._embedding_failures.popleft() if self._embedding_failures else None
        if failure is not None:
            return Answer(failure, self._error_body(failure, "scripted embeddings failure"))
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(body.get("model"), str) or not body["model"]:
            return self._invalid("you must provide a model parameter", "model")
        if not isinstance(texts, list) or not texts or len(texts) > 2048 or not all(
                isinstance(t, str) and t for t in texts):
            return self._invalid("'$.input' is invalid: expected a non-empty string or a list "
                                 "of 1 to 2048 non-empty strings", "input")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            return self._invalid(f"invalid encoding_format {encoding!r}", "encoding_format")
        vectors = self.embedder.embed(texts)
        data: list[dict[str, Any]] = []
        for index, vector in enumerate(vectors):
            value: Any = list(vector)
            if encoding == "base64":
                value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": value})
        tokens = sum(estimate_tokens(len(t)) for t in texts)
        payload = {"object": "list", "data": data, "model": body["model"],
                   "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        return Answer(200, json.dumps(payload).encode())

    # /responses -------------------------------------------------------------------------

    def _responses_endpoint(self, body: dict[str, Any]) -> Answer:
        effective = dict(body)
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        previous = body.get("previous_response_id")
        if previous is not None:
            with self._lock:
                stored = self._responses.get(previous)
            if stored is None:
                return self._invalid(f"Previous response with id '{previous}' not found.",
                                     "previous_response_id")
            effective["input"] = [*stored, *(items if isinstance(items, list) else [])]
        if self.strict:
            errors = wire_rules.check_responses(effective)
            if errors:
                return self._invalid(errors[0], "input")
        if body.get("stream"):
            message = "stream=true on /v1/responses is not supported by FakeOpenAIServer"
            return self._invalid(message, "stream")
        reply = self._next_reply(effective)
        if reply.raw_body is not None:
            return Answer(reply.status, reply.raw_body, delay=reply.delay)
        response = self._response(reply, effective)
        inputs = effective.get("input")
        context = [{"role": "user", "content": inputs}] if isinstance(inputs, str) \
            else list(inputs or [])
        with self._lock:
            self._responses[response["id"]] = [*context, *response["output"]]
        return Answer(reply.status, json.dumps(response).encode(), delay=reply.delay)

    def _response(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        token = secrets.token_hex(8)
        output: list[dict[str, Any]] = []
        linked = reply.thinking is not None
        reasoning_id = f"rs_{token}"
        n = 0

        def item_id(prefix: str) -> str:
            nonlocal n
            n += 1
            if linked:
                return wire_rules.linked_item_id(reasoning_id, prefix, n)
            return f"{prefix}_{token}{n:02d}"

        if reply.thinking is not None:
            config = body.get("reasoning")
            summarize = isinstance(config, dict) and config.get("summary") is not None
            output.append({
                "id": reasoning_id, "type": "reasoning", "status": None,
                "summary": [{"type": "summary_text", "text": reply.thinking}] if summarize
                else [],
                "encrypted_content": wire_rules.seal(reply.thinking)})
        if reply.text is not None and (reply.text or not reply.tool_calls):
            output.append({
                "id": item_id("msg"), "type": "message", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": [],
                             "logprobs": []}]})
        for cid, name, args in reply.tool_calls:
            output.append({"id": item_id("fc"), "type": "function_call", "call_id": cid,
                           "name": name, "arguments": args, "status": "completed"})
        input_chars = len(json.dumps(body.get("input"))) + len(str(body.get("instructions")
                                                                   or ""))
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None \
            else estimate_tokens(input_chars)
        reasoning_tokens = estimate_tokens(len(reply.thinking or ""))
        completion = reply.completion_tokens if reply.completion_tokens is not None else \
            estimate_tokens(len(reply.text or "") + sum(len(a) for _, _, a in reply.tool_calls))
        completion += reasoning_tokens
        now = int(time.time())
        return {
            "id": f"resp_{token}", "object": "response", "created_at": now,
            "completed_at": now, "status": "completed", "error": None,
            "incomplete_details": None, "background": False,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": body.get("model") or self.model, "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True), "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []),
            "top_p": body.get("top_p", 1.0), "truncation": body.get("truncation", "disabled"),
            "metadata": body.get("metadata") or {}, "user": None,
            "usage": {"input_tokens": prompt,
                      "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                      "output_tokens": completion,
                      "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                      "total_tokens": prompt + completion},
        }
