"""The facade builds its model-facing parts (privacy, compressor, memory) and forgetting's
(lifecycle, holds, eraser, retention) on first use (issue 32 item 11): constructing
``Chatkeep`` and reading the store imports none of them, each part is built once whatever
the threads, and what can refuse its arguments still refuses them at construction."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from chatkeep import Chatkeep, ConfigError, InvalidArgument, PrivacyError, Ref
from chatkeep import app as app_module

LOADED = """
import json, sys
from chatkeep import Chatkeep, Ref
keep = Chatkeep(sys.argv[1])
session = keep.sessions.create(Ref("organization", 1))
session.add_user("hello")
keep.usage()
keep.holds.list(Ref("organization", 1))
print(json.dumps(sorted(m for m in sys.modules if m.startswith((
    "chatkeep.history.compressor", "chatkeep.privacy.guard", "chatkeep.privacy.detector",
    "chatkeep.memory.service", "chatkeep.llm.adapt", "phonenumbers")))))
keep.close()
"""


def test_the_job_names_are_the_layers_own() -> None:
    from chatkeep.history.compressor import FOLD_JOB
    from chatkeep.memory import DISTIL_JOB

    assert (app_module._DISTIL_JOB, app_module._FOLD_JOB) == (DISTIL_JOB, FOLD_JOB)


def test_reading_and_writing_the_store_builds_no_model_facing_part(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", LOADED, f"sqlite:///{tmp_path / 'a.db'}"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_each_part_is_built_once_and_wired(tmp_path: Path) -> None:
    keep = Chatkeep(f"sqlite:///{tmp_path / 'b.db'}", dispatcher="thread",
                    config={"memory": {"recall_in_history": True}})
    try:
        seen: list[Any] = []
        barrier = threading.Barrier(8)

        def first_use() -> None:
            barrier.wait()
            seen.append(keep.compressor)

        threads = [threading.Thread(target=first_use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(part) for part in seen}) == 1
        compressor = keep.compressor
        assert compressor is seen[0] and keep.memory is keep.memory
        assert compressor.quotas is keep.quotas and keep.memory.quotas is keep.quotas
        assert compressor.outbound_filter is keep.privacy
        assert compressor.memory_provider == keep.memory.provider
        assert compressor.on_backlog  # a thread dispatcher folds the backlog in the background
    finally:
        keep.close()


def test_a_delete_before_first_use_builds_nothing(tmp_path: Path) -> None:
    keep = Chatkeep(f"sqlite:///{tmp_path / 'c.db'}")
    session = keep.sessions.create(Ref("organization", 1))
    keep.sessions.delete(session.id, Ref("organization", 1))
    assert not {"privacy", "compressor", "memory"} & set(vars(keep))
    keep.close()


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"recognizers": [object()]}, PrivacyError),
    ({"embedder": "openai"}, ConfigError),
    ({"config": {"memory": {"embedding_model": "text-embedding-3-small"}}}, ConfigError),
], ids=["recognizer", "embedder", "embedding model without an endpoint"])
def test_what_can_refuse_refuses_at_construction(tmp_path: Path, kwargs: dict[str, Any],
                                                 error: type[Exception],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(error):
        Chatkeep(f"sqlite:///{tmp_path / 'd.db'}", **kwargs)
    assert not (tmp_path / "d.db").exists()


READ_ONLY = """
import json, sys
from chatkeep import Chatkeep, Ref
keep = Chatkeep(sys.argv[1])
session = keep.sessions.create(Ref("organization", 1))
session.add_user("hello")
keep.usage()
keep.sessions.list(Ref("organization", 1))
print(json.dumps(sorted(m for m in sys.modules if m.startswith((
    "chatkeep.lifecycle", "chatkeep.store.lifecycle", "chatkeep.store.retention",
    "chatkeep.formats")))))
keep.holds.list(Ref("organization", 1))
print(json.dumps("chatkeep.lifecycle.holds" in sys.modules))
keep.close()
"""


def test_reading_the_store_builds_no_forgetting_part(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", READ_ONLY,
                             f"sqlite:///{tmp_path / 'r.db'}"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "true"]


def test_the_forgetting_parts_are_built_once_and_share_one_store(tmp_path: Path) -> None:
    keep = Chatkeep(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        assert not {"lifecycle", "holds", "eraser", "retention"} & set(vars(keep))
        seen: list[Any] = []
        barrier = threading.Barrier(8)

        def first_use() -> None:
            barrier.wait()
            seen.append(keep.retention)

        threads = [threading.Thread(target=first_use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(part) for part in seen}) == 1 and keep.retention is seen[0]
        lifecycle = keep.lifecycle
        assert keep.holds._store is lifecycle and keep.eraser.store is lifecycle
        assert keep.retention._lifecycle is lifecycle
        session = keep.sessions.create(Ref("organization", 1))
        session.add_user("hello")
        keep.holds.place(Ref("organization", 1), session_id=session.id, reason="audit")
        assert [hold.session_id for hold in lifecycle.list_holds(Ref("organization", 1))] \
            == [session.id]
    finally:
        keep.close()


def test_the_retention_bound_is_the_services_own() -> None:
    from chatkeep.lifecycle.retention import MAX_DAYS
    from chatkeep.validation import MAX_RETENTION_DAYS

    assert MAX_DAYS == MAX_RETENTION_DAYS == 36_500


@pytest.mark.parametrize(("section", "days"), [
    ("session_retention_days", -1), ("memory_retention_days", 36_501),
    ("memory_retention_days", -5),
])
def test_a_bad_retention_default_refuses_at_construction_as_the_service_does(
        tmp_path: Path, section: str, days: object) -> None:
    """Refused when ``Chatkeep`` is made, with the message building the service gives."""
    from chatkeep.lifecycle.retention import RetentionService

    with pytest.raises(InvalidArgument) as refused:
        Chatkeep(f"sqlite:///{tmp_path / 'e.db'}", config={"privacy": {section: days}})
    argument = section.replace("retention_days", "idle_days")
    with pytest.raises(InvalidArgument) as service:
        RetentionService(None, None, **{argument: days})  # type: ignore[arg-type]
    assert str(refused.value) == str(service.value)
    assert not (tmp_path / "e.db").exists()


def test_a_good_retention_default_is_the_policy(tmp_path: Path) -> None:
    keep = Chatkeep(f"sqlite:///{tmp_path / 'g.db'}",
                    config={"privacy": {"session_retention_days": 36_500,
                                        "memory_retention_days": 0}})
    try:
        policy = keep.retention.policy(Ref("organization", 1))
        assert (policy.session_idle_days, policy.memory_idle_days) == (36_500, 0)
    finally:
        keep.close()
