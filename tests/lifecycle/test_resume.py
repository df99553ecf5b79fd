"""An erasure killed with SIGKILL halfway finishes when run again: the rerun resumes the
same job, its counts are exact (they moved with each batch), nothing is left; memory
stays bounded by the batch (messages are deleted in batches, never loaded)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from chatkeep import Chatkeep, MessageDraft, Ref, Role

T, ANN, BOB = Ref("org", 1), Ref("user", "ann"), Ref("user", "bob")
SESSIONS, MESSAGES = 3, 600

CHILD = textwrap.dedent("""
    import sys
    from chatkeep import Chatkeep, Ref
    keep = Chatkeep(sys.argv[1])
    def report(counts):
        print(counts.get("messages", 0), flush=True)
    keep.erase(Ref("org", 1), actor=Ref("user", "ann"), batch_size=25, progress=report)
    print("finished", flush=True)
""")


@pytest.mark.slow
def test_an_erasure_killed_midway_finishes_on_the_rerun(db_url: str) -> None:
    keep = Chatkeep(db_url)
    for actor in (ANN, BOB):
        for _ in range(SESSIONS):
            session = keep.sessions.create(T, actor)
            session.add_drafts([MessageDraft(Role.USER, f"message {i} of {actor.id}")
                                for i in range(MESSAGES)])
    child = subprocess.Popen([sys.executable, "-c", CHILD, db_url], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip() == "finished":
            pytest.fail("the erasure finished before it could be killed")
        if int(line) >= MESSAGES:  # past the first session, inside the second
            os.kill(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    halfway = keep.plan_erasure(T, actor=ANN)
    assert 0 < halfway.messages < SESSIONS * MESSAGES  # some gone, some left: resumable

    receipt = keep.erase(T, actor=ANN, batch_size=25)

    assert receipt.counts["sessions"] == SESSIONS
    assert receipt.counts["messages"] == SESSIONS * MESSAGES  # exact across both runs
    assert len(receipt.session_ids) == SESSIONS
    assert keep.verify_erasure(receipt).ok
    assert keep.plan_erasure(T, actor=ANN).empty
    assert sum(s.message_count for s in keep.sessions.list(T, actor=BOB)) == SESSIONS * MESSAGES
    [run] = [e for e in keep.lifecycle.log(T) if e["action"] == "erase"]
    assert run["erasure_id"] == receipt.erasure_id  # one job: the killed run's, finished
    keep.close()
