"""A worker on default config never sends a protected session raw (issue 20, item 9).

The application runs with ``privacy.anonymize_pii`` on and records a conversation full of
personal values. Then ``chatkeep sweep`` runs in a *second process*, the way cron runs it:
the console command, default configuration (so the application switch is off there), the
model and the embedding endpoint given by environment variables and pointed at the
recording server in this process. The session was created under the switch, so the sweep
must redact it: the distiller's requests and the embeddings of the memories it writes
carry placeholders, never a raw value, and the memories stored hold the real values.

The positive control: a session the application created with the switch off goes out raw
through the same worker, and the same check sees it (so the check can fail).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from egress_helpers import ModelPlayer, assert_never_raw, leaks

from chatkeep import Chatkeep, Ref, ToolCall
from chatkeep.memory.embedders import HashEmbedder
from chatkeep.testing import FakeOpenAIServer

ORG = Ref("organization", 1)
ACTOR = Ref("user", 3)
VALUES = {"email": "ana.garcia@example.com", "phone": "07700 900123", "ssn": "536-22-1234",
          "card": "4111 1111 1111 1111", "iban": "GB82 WEST 1234 5698 7654 32",
          "name": "Margarethe Vandenberghe"}
SUBJECT = Ref("customer", VALUES["email"])


def chatkeep_command() -> list[str]:
    """The console script installed beside this interpreter, else its entry point run by
    this interpreter (both start a fresh process)."""
    script = shutil.which("chatkeep", path=str(Path(sys.executable).parent))
    if script:
        return [script]
    return [sys.executable, "-c", "from chatkeep.cli import main; main()"]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    player = ModelPlayer()
    with FakeOpenAIServer(responder=player,
                          embedder=HashEmbedder(64, model="fake-embed")) as fake:
        fake.player = player  # type: ignore[attr-defined]
        yield fake


def record_conversation(url: str, *, app_switch: bool, history_first: bool,
                        server: FakeOpenAIServer) -> str:
    """The application's side: a session full of personal values, in its own keep (closed
    before the worker starts). ``history_first``: the app already built a history, so the
    session's placeholder vault is stored; otherwise nothing has left yet."""
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    with Chatkeep(url, model=client, dispatcher="inline",
                  config={"privacy": {"anonymize_pii": app_switch},
                          "memory": {"distil_on_compress": False}}) as keep:
        session = keep.sessions.create(ORG, ACTOR, SUBJECT)
        session.add_user(f"Hi, my name is {VALUES['name']}. Mail me at {VALUES['email']} "
                         f"or call {VALUES['phone']}.")
        session.add_assistant("Noted. What do you need?")
        session.record([{"role": "user", "content": f"My SSN is {VALUES['ssn']} and my card "
                                                    f"is {VALUES['card']}."}],
                       format="openai_chat")
        session.add_assistant(tool_calls=[ToolCall("call_1", "update_billing", json.dumps(
            {"iban": VALUES["iban"], "holder": VALUES["name"]}))])
        session.add_tool_result("call_1", {"ok": True, "holder": VALUES["name"]})
        session.record([{"role": "assistant", "content": [
            {"type": "text", "text": f"Done: payments now go to {VALUES['iban']}."}]}],
            format="anthropic_messages")
        session.add_user(f"Thanks. Tell {VALUES['name'].upper()} when it clears; "
                         "ana.garcia%40example.com gets the receipt.")
        session.add_assistant("Will do.")
        if history_first:
            keep.compressor.build_history(session, "You help customers.")
        return session.id


def run_sweep(url: str, server: FakeOpenAIServer, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``chatkeep sweep`` in a second process, on default config: only the model and the
    embedding endpoint come from the environment (no ``CHATKEEP_*`` setting leaks in from
    this one, so ``privacy.anonymize_pii`` is off there)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CHATKEEP_", "OPENAI_"))}
    env.update({"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k",
                "CHATKEEP_LLM__MAX_RETRIES": "0",
                "CHATKEEP_MEMORY__EMBEDDING_MODEL": "fake-embed",
                # Idle at once: the conversation above ended a moment ago.
                "CHATKEEP_MEMORY__SWEEP_IDLE_AFTER": "0"})
    return subprocess.run([*chatkeep_command(), "sweep", "--db", url], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("history_first", [False, True],
                         ids=["nothing-sent-yet", "after-a-history"])
def test_a_sweep_on_default_config_redacts_a_protected_session(
        tmp_path: Path, server: FakeOpenAIServer, history_first: bool) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    session_id = record_conversation(url, app_switch=True, history_first=history_first,
                                     server=server)
    before = len(server.bodies())
    done = run_sweep(url, server, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 distilled, 0 failed" in done.stdout, done.stdout
    bodies = server.bodies()[before:]
    assert_never_raw([(f"worker request {i}", b) for i, b in enumerate(bodies)], VALUES)
    extraction = [b for b in bodies if "You extract durable memories" in b]
    assert extraction, "the worker must have asked the distiller's model"
    assert "customer:<EMAIL_1>" in extraction[0], "the subject reference, redacted"
    assert server.embedding_requests, "the worker embedded the memories it wrote"
    # The memories were written with the real values back in place of the placeholders.
    with Chatkeep(url) as keep:
        session = keep.sessions.get_unscoped(session_id)
        assert session.row.distilled_through == session.message_count
        contents = " ".join(m.content for m in keep.memory.list(ORG))
    assert VALUES["email"] in contents and "<EMAIL_" not in contents, contents


def test_the_check_sees_a_session_that_was_never_protected(
        tmp_path: Path, server: FakeOpenAIServer) -> None:
    """Positive control: with the switch off in the application too, the session goes out
    raw through the same worker, and the check above would have failed on it."""
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    record_conversation(url, app_switch=False, history_first=False, server=server)
    done = run_sweep(url, server, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    extraction = [b for b in server.bodies() if "You extract durable memories" in b]
    assert extraction and leaks(extraction[0], VALUES)
