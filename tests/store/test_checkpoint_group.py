"""chatkeep.store.checkpoints' group commit: writes that queue while a transaction runs
go in the next one together, and a group that fails is run again one write per
transaction, each caller getting its own outcome (on both stores)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, insert, select

from chatkeep.store.checkpoints import _Group
from chatkeep.store.direct import driver_transport
from chatkeep.store.engine import make_engine
from chatkeep.store.executor import CoreTransport, Executor, Transport

PROBE = Table("checkpoint_group_probe", MetaData(), Column("id", Integer, primary_key=True))


class Counting:
    """A transport counting the write transactions it opens."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.dialect = inner.dialect
        self.integrity_errors = inner.integrity_errors
        self.opened = 0

    def transaction(self) -> AbstractContextManager[Executor]:
        self.opened += 1
        return self.inner.transaction()


@pytest.fixture
def transport(db_url: str) -> Iterator[Counting]:
    engine = make_engine(db_url)
    PROBE.metadata.create_all(engine)
    yield Counting(driver_transport(engine) or CoreTransport(engine))
    engine.dispose()


def adding(row_id: int) -> Callable[[Executor], int]:
    def work(ex: Executor) -> int:
        ex.many(insert(PROBE), [{"id": row_id}])
        return row_id

    return work


def failing(ex: Executor) -> None:
    ex.many(insert(PROBE), [{"id": 99}])
    raise ValueError("this write fails")


def run_queued(group: _Group, works: list[Callable[[Executor], Any]]) -> list[Any]:
    """The first write of ``works`` holds its transaction until the others are queued
    behind it; returns each call's outcome (its value, or the exception it raised)."""
    gate, inside = threading.Event(), threading.Event()
    outcomes: list[Any] = [None] * (len(works) + 1)

    def first(ex: Executor) -> int:
        inside.set()
        assert gate.wait(30)
        return adding(1)(ex)

    def call(index: int, work: Callable[[Executor], Any]) -> None:
        try:
            outcomes[index] = group.run(work)
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=call, args=(0, first))]
    threads[0].start()
    assert inside.wait(30)
    for index, work in enumerate(works, start=1):
        threads.append(threading.Thread(target=call, args=(index, work)))
        threads[-1].start()
    while len(group._queue) < len(works):  # each waits behind the first's transaction
        time.sleep(0.001)
    gate.set()
    for thread in threads:
        thread.join(30)
    return outcomes


def stored(transport: Counting) -> set[int]:
    with transport.inner.reading() as ex:  # type: ignore[attr-defined]
        return {int(r[0]) for r in ex.rows(select(PROBE.c.id), {})}


def test_writes_queued_behind_a_commit_share_the_next_transaction(
        transport: Counting) -> None:
    outcomes = run_queued(_Group(transport), [adding(2), adding(3), adding(4)])
    assert outcomes == [1, 2, 3, 4]
    assert stored(transport) == {1, 2, 3, 4}
    assert transport.opened == 2  # the first alone, the three queued behind it together


def test_a_failing_write_fails_alone_and_the_rest_of_its_group_commits(
        transport: Counting) -> None:
    outcomes = run_queued(_Group(transport), [adding(2), failing, adding(3)])
    assert outcomes[:2] == [1, 2] and outcomes[3] == 3
    assert isinstance(outcomes[2], ValueError)
    assert stored(transport) == {1, 2, 3}  # the failing write's row rolled back
    # the first; the group of three (rolled back); then each of the three alone
    assert transport.opened == 5


def test_a_lone_write_is_one_transaction(transport: Counting) -> None:
    group = _Group(transport)
    assert group.run(adding(7)) == 7
    with pytest.raises(ValueError, match="this write fails"):
        group.run(failing)
    assert stored(transport) == {7}
    assert transport.opened == 2 and not group._busy
