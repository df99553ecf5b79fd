"""The in-process dispatchers: inline and the thread pool run jobs and contain failures."""

from __future__ import annotations

import threading

import pytest

from chatkeep.jobs import ThreadPoolDispatcher, UnknownJob, make_dispatcher


def test_dispatchers_run_jobs_and_contain_failures() -> None:
    seen: list[str] = []
    done = threading.Event()

    def ok(session_id: str) -> None:
        seen.append(session_id)
        done.set()

    def boom(session_id: str) -> None:
        raise RuntimeError("job failed")

    inline = make_dispatcher("inline")
    inline.bind({"ok": ok, "boom": boom})
    inline.dispatch("ok", "s1")
    inline.dispatch("boom", "s2")  # logged, not raised
    with pytest.raises(UnknownJob):
        inline.dispatch("missing", "s3")
    assert seen == ["s1"]

    pool = ThreadPoolDispatcher(max_workers=2)
    pool.bind({"ok": ok, "boom": boom})
    pool.dispatch("boom", "s4")
    pool.dispatch("ok", "s5")
    pool.wait(5)
    pool.shutdown()
    assert seen == ["s1", "s5"]
    assert isinstance(make_dispatcher(None), ThreadPoolDispatcher)
    with pytest.raises(ValueError):
        make_dispatcher("carrier-pigeon")
