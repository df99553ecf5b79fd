"""Celery against the real brokers on 127.0.0.1, with real worker processes.

The distil job goes through the broker to a ``celery worker`` subprocess that runs
the shipped ``chatkeep.jobs.celery`` app; the model is the fake OpenAI server in
this process. A worker killed in the middle of distilling leaves the watermark
where it was, and the late-acknowledged job is delivered again and completes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.testing import FakeOpenAIServer, Reply

pytest.importorskip("celery", reason="the celery extra is not installed")

from chatkeep.jobs.celery import CeleryDispatcher, make_app

BROKERS = {
    "redis": ("redis://127.0.0.1:6379/15", 6379),
    "rabbitmq": ("amqp://guest:guest@127.0.0.1:5672//", 5672),
}
ORG = Ref("organization", 1)
FACT = "Invoices are approved by the finance lead."


class SlowFirstExtraction:
    """Summaries: plain text. The first extraction blocks until released (the worker is
    killed meanwhile); later ones wait until the test has looked, then answer one fact."""

    def __init__(self) -> None:
        self.extractions = 0
        self.first_arrived = threading.Event()
        self.release = threading.Event()
        self.proceed = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if not body["messages"][0]["content"].startswith("You extract durable memories"):
            return Reply.ok("Summary of the earlier turns.")
        self.extractions += 1
        if self.extractions == 1:
            self.first_arrived.set()
            self.release.wait(60)
            return Reply.error(503, "the worker that asked is gone")
        self.proceed.wait(60)
        return Reply.json({"facts": [{"scope": "tenant", "content": FACT}]})


@pytest.fixture(params=sorted(BROKERS))
def broker(request: pytest.FixtureRequest, require_service: Callable[[str, int], None]) -> str:
    url, port = BROKERS[request.param]
    require_service(request.param, port)
    return url


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path / 'celery.db'}"


@pytest.fixture
def start_worker(broker: str, sqlite_url: str,
                 llm_server: FakeOpenAIServer) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    queue = f"chatkeep-test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "CHATKEEP_DATABASE_URL": sqlite_url,
           "CHATKEEP_CELERY_BROKER": broker, "CHATKEEP_CELERY_QUEUE": queue,
           "OPENAI_BASE_URL": llm_server.base_url, "OPENAI_API_KEY": "test",
           "CHATKEEP_LLM__TIMEOUT": "120", "CHATKEEP_LLM__MAX_RETRIES": "0",
           # Redis hands an unacknowledged job to another worker after this many seconds
           # (RabbitMQ does so as soon as the dead worker's connection drops).
           "CHATKEEP_CELERY_VISIBILITY_TIMEOUT": "5"}
    workers: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "chatkeep.jobs.celery", "worker",
             "-Q", queue, "-P", "prefork", "-c", "1", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "--loglevel=INFO"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True)
        workers.append(proc)
        return proc

    start.queue = queue  # type: ignore[attr-defined]
    yield start
    for proc in workers:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _compressing_keep(url: str, broker: str, queue: str, server: FakeOpenAIServer) -> Chatkeep:
    import openai

    app = make_app(broker, task_default_queue=queue, sweep_every=None)
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    return Chatkeep(url, model=client, dispatcher=CeleryDispatcher(app),
                    config={"chat": {"max_history_tokens": 600, "summary_max_tokens": 100}})


def _over_budget_session(keep: Chatkeep) -> str:
    session = keep.sessions.create(ORG, Ref("user", 1))
    for i in range(10):
        session.add_user(f"Turn {i}: invoices need the finance lead's approval. " + "x " * 60)
        session.add_assistant(f"Understood {i}. " + "y " * 60)
    keep.compressor.build_history(session, "sys")  # compresses, dispatches "distil"
    assert session.summary_watermark > 0
    return session.id


def _pool_children(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(entry))
    return children


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["whole worker", "pool process"])
def test_worker_killed_while_distilling_leaves_the_watermark_and_the_job_completes(
        broker: str, sqlite_url: str, llm_server: FakeOpenAIServer,
        start_worker: Callable[[], subprocess.Popen[str]], kill: str) -> None:
    model = SlowFirstExtraction()
    llm_server.responder = model
    keep = _compressing_keep(sqlite_url, broker, start_worker.queue,  # type: ignore[attr-defined]
                             llm_server)
    first = start_worker()
    session_id = _over_budget_session(keep)

    assert model.first_arrived.wait(60), "the worker never started distilling"
    if kill == "whole worker":
        os.killpg(first.pid, signal.SIGKILL)  # main process and pool child: the broker
        first.wait(10)                         # redelivers the unacknowledged job
    else:
        (child,) = _pool_children(first.pid)   # the main process sees the child lost and
        os.kill(child, signal.SIGKILL)         # rejects the job back to the queue
    time.sleep(1)
    row = keep.sessions.get_unscoped(session_id).row
    assert row.distilled_through == 0, "a killed distil must not move the watermark"
    assert keep.memory.list(ORG) == []
    model.release.set()
    model.proceed.set()

    if kill == "whole worker":
        start_worker()  # the unacknowledged job is delivered again
    _wait(lambda: keep.sessions.get_unscoped(session_id).row.distilled_through > 0, 90,
          "the redelivered distil job")
    assert [m.content for m in keep.memory.list(ORG)] == [FACT]
    assert model.extractions >= 2
    keep.close()


@pytest.mark.slow
def test_sweep_task_dispatches_through_the_broker(
        broker: str, sqlite_url: str, llm_server: FakeOpenAIServer,
        start_worker: Callable[[], subprocess.Popen[str]]) -> None:
    llm_server.responder = lambda body: Reply.json(
        {"facts": [{"scope": "tenant", "content": FACT}]})
    keep = _compressing_keep(sqlite_url, broker, start_worker.queue,  # type: ignore[attr-defined]
                             llm_server)
    session = keep.sessions.create(ORG, Ref("user", 1))
    session.add_user("Invoices are approved by the finance lead, always.")
    session.add_assistant("Noted.")
    start_worker()
    app = keep.dispatcher.app  # type: ignore[attr-defined]
    app.send_task("chatkeep.sweep")  # what beat sends every minute; idle_after is 30 min...
    time.sleep(3)
    assert keep.sessions.get_unscoped(session.id).row.distilled_through == 0  # ...so nothing yet
    keep.memory.sweep(idle_after=__import__("datetime").timedelta(0))  # now it is idle
    _wait(lambda: keep.sessions.get_unscoped(session.id).row.distilled_through == 2, 60,
          "the swept session to be distilled by the worker")
    assert [m.content for m in keep.memory.list(ORG)] == [FACT]
    keep.close()
