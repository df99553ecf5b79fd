"""Without the extra nothing is imported: a turn that folds runs in a process where
``opentelemetry`` cannot be imported, and no module of it is loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["opentelemetry"] = None  # the extra is not installed
    import openai
    from chatkeep import Chatkeep, Ref
    from chatkeep.observability import record_quota_refusal, tracing
    from chatkeep.testing import FakeOpenAIServer, Reply

    assert tracing.ON is False
    server = FakeOpenAIServer(responder=lambda body: Reply.ok("A short summary.")).start()
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    keep = Chatkeep(sys.argv[1], model=client, dispatcher="inline",
                    config={"chat": {"max_history_tokens": 300, "recent_messages_min": 1},
                            "memory": {"distil_on_compress": False}})
    session = keep.sessions.create(Ref("organization", 1))
    for i in range(6):
        session.add_user(f"Question {i}. " + "More detail follows here. " * 10)
        session.add_assistant(f"Answer {i}. " + "More detail follows here. " * 10)
    session.add_user("And now?")
    history = keep.compressor.build_history(session, "You help.")
    assert history.info.compressed, history.info
    record_quota_refusal("organization:1", "chat")
    keep.close()
    server.stop()
    loaded = sorted(m for m, v in sys.modules.items()
                    if m.startswith("opentelemetry") and v is not None)
    print("loaded:", loaded)
    assert not loaded, loaded
    print("ok")
""")


def test_a_folding_turn_runs_and_imports_nothing_of_opentelemetry(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, f"sqlite:///{tmp_path / 'c.db'}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok"), done.stdout


def test_with_the_api_installed_chatkeep_does_not_import_it_until_a_hook_runs() -> None:
    script = ("import sys\nimport chatkeep.history.round, chatkeep.llm.adapt\n"
              "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"
