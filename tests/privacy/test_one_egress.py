"""One egress, by construction: no module of the package calls a model or an embedding
client around it. The source is read, not run, so a new call site fails here before any
request is ever made (issue 20).

Chat models: the SDK is called only by the transports (``llm/openai_client.py``); the
core calls ``.complete`` only on models its constructors wrap in ``GuardedChatModel``
(which sends through the bound egress) or, inside the guard, on the wrapped model.
Embeddings: the SDK is called only by ``memory/embedders/openai_embeddings.py``; an
embedder is called only by ``HybridRetriever._send``, and only with texts its callers masked
(``_masked``)."""

from __future__ import annotations

import ast
from pathlib import Path

import chatkeep

ROOT = Path(chatkeep.__file__).parent
CLIENT_RESOURCES = {"completions", "embeddings", "responses", "messages"}

#: (module, function) -> why that call is allowed.
EMBEDDINGS_TRANSPORT = "memory/embedders/openai_embeddings.py"
ALLOWED_CLIENT_CALLS = {
    ("llm/openai_client.py", "complete"): "the chat transport, reached via GuardedChatModel",
    (EMBEDDINGS_TRANSPORT, "embed"): "the embeddings transport, reached via _send",
    (EMBEDDINGS_TRANSPORT, "_batch"): "the embeddings transport, reached via _send",
    (EMBEDDINGS_TRANSPORT, "embed_counted"): "the async transport's counting call, reached "
                                             "via _send (the bridge's embed_counted)",
}
ALLOWED_COMPLETE = {
    ("llm/adapt.py", "complete"): "GuardedChatModel: the scrubbed body to the inner model",
    ("aio/bridge.py", "complete"): "BridgedChatModel: always the inner of a GuardedChatModel",
    ("history/summarizers/llm.py", "_complete"): "self.model is guarded in __init__",
    ("memory/distiller.py", "_ask"): "self.model is guarded in __init__, egress bound",
}
ALLOWED_EMBED = {
    ("memory/hybrid.py", "_send"): "texts masked by its callers",
    ("memory/hybrid.py", "call"): "_send's own call (the quota's reservation around it)",
    ("aio/bridge.py", "embed"): "BridgedEmbedder: the inner of the core's embedder",
    ("aio/bridge.py", "embed_counted"): "BridgedEmbedder's counting call, the same inner",
    ("memory/distiller.py", "_embed"): "HybridRetriever.embed, which masks",
    ("memory/service.py", "_embed_page"): "HybridRetriever.embed, which masks (the "
                                          "backfill's page, reserved on its tenant)",
    ("memory/service.py", "_write"): "HybridRetriever.embed, which masks",
}


def calls() -> list[tuple[str, str, str, ast.Call]]:
    """(module, enclosing function, dotted callee, node) of every attribute call."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if module.startswith("testing/"):
            continue  # the fakes are servers, not callers
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    found.append((module, function.name, ast.unparse(node.func), node))
    return found


def test_only_the_transports_call_a_client_sdk() -> None:
    offenders = [(m, f, callee) for m, f, callee, _ in calls()
                 if callee.endswith(".create")
                 and CLIENT_RESOURCES & set(callee.split(".")[:-1])
                 and (m, f) not in ALLOWED_CLIENT_CALLS]
    assert offenders == []


def test_models_are_completed_only_behind_the_guard() -> None:
    sites = {(m, f) for m, f, callee, _ in calls() if callee.endswith(".complete")}
    assert sites - set(ALLOWED_COMPLETE) == set()
    for module in ("history/summarizers/llm.py", "memory/distiller.py"):
        source = (ROOT / module).read_text(encoding="utf-8")
        assert "self.model = as_chat_model(model)" in source, module


def test_embedders_are_called_only_with_masked_texts() -> None:
    sites = {(m, f) for m, f, callee, _ in calls() if callee.endswith(".embed")}
    assert sites - set(ALLOWED_EMBED) == set()
    senders = {f for m, f, callee, _ in calls()
               if m == "memory/hybrid.py" and callee == "self._send"}
    assert senders == {"embed", "query_vector"}
    masking = {f for m, f, callee, _ in calls()
               if m == "memory/hybrid.py" and callee == "self._masked"}
    assert senders <= masking


def test_the_scan_sees_the_calls_it_allows() -> None:
    """The allow-lists name real call sites (a rename would otherwise empty the check)."""
    seen = {(m, f) for m, f, _, _ in calls()}
    for allowed in (ALLOWED_CLIENT_CALLS, ALLOWED_COMPLETE, ALLOWED_EMBED):
        assert set(allowed) <= seen
