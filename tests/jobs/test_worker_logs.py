"""A Celery worker's log holds no Alembic INFO lines (issue 35, item 9): they were seven
at every start (its plugins, then the migration context), before the worker's own."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatkeep import Chatkeep
from chatkeep.jobs import celery as jobs_celery


@pytest.fixture
def fresh_worker() -> Iterator[None]:
    alembic_log = logging.getLogger("alembic")
    level = alembic_log.level
    alembic_log.setLevel(logging.NOTSET)
    yield
    alembic_log.setLevel(level)
    if jobs_celery._keep is not None:
        jobs_celery._keep.close()
    jobs_celery.configure(jobs_celery._default_keep)


def _start_worker(tmp_path: Path) -> Chatkeep:
    jobs_celery.configure(lambda: Chatkeep(f"sqlite:///{tmp_path / 'w.db'}"))
    keep = jobs_celery.worker_keep()
    keep.start()  # a new database: its schema is created and stamped by Alembic
    return keep


def test_the_worker_start_logs_no_alembic_info(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh_worker: None) -> None:
    caplog.set_level(logging.INFO)  # as `celery worker --loglevel=INFO` sets the root
    logging.getLogger("alembic").setLevel(logging.NOTSET)
    keep = _start_worker(tmp_path)
    assert keep.sessions is not None
    assert [r.getMessage() for r in caplog.records if r.name.startswith("alembic")] == []


def test_a_level_set_for_alembic_is_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh_worker: None) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger("alembic").setLevel(logging.INFO)  # the operator asked for them
    _start_worker(tmp_path)
    assert any(r.name.startswith("alembic") for r in caplog.records)
