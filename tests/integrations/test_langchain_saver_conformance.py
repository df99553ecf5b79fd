"""``ChatkeepSaver`` measured by LangGraph's own checkpointer conformance suite.

``langgraph-checkpoint-conformance`` (the dev extra) registers a saver factory and runs
its capability suites (put, put_writes, get_tuple, list, delete_thread, and the extended
prune; copy_thread and delete_for_runs, not implemented, are reported as not detected,
and not run). Every test
of every detected capability must pass, on SQLite and PostgreSQL, through the async
methods over an ``AsyncChatkeep`` and through the sync methods over a ``Chatkeep``
(driven by the suite's async calls). Nothing is deselected: the suite tests only the
public ``BaseCheckpointSaver`` protocol, none of another saver's internals.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import uuid4

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, Capability

from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.langchain import ChatkeepSaver

TENANT = Ref("organization", 7)


class SyncDriven(ChatkeepSaver):
    """The sync methods under the suite's async calls (the suite awaits ``a*`` only)."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def aprune(self, thread_ids: Sequence[str], *,
                     strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


def run_suite(db_url: str, api: str) -> Any:
    name = f"ChatkeepSaver-{api}-{uuid4().hex[:8]}"

    async def factory() -> AsyncIterator[ChatkeepSaver]:
        if api == "async":
            async with AsyncChatkeep(db_url, dispatcher="inline") as akeep:
                yield ChatkeepSaver(akeep, tenant=TENANT)
        else:
            with Chatkeep(db_url, dispatcher="inline") as keep:
                yield SyncDriven(keep, tenant=TENANT)

    registered = checkpointer_test(name=name)(factory)
    return asyncio.run(validate(registered))


@pytest.mark.parametrize("driven", ["sync", "async"])
def test_langgraph_conformance_suite(db_url: str, driven: str) -> None:
    report = run_suite(db_url, driven)
    failures = {cap: result.failures for cap, result in report.results.items()
                if result.failures}
    assert not failures, failures
    assert report.passed_all_base(), {c: r for c, r in report.results.items()}
    ran = {cap for cap, result in report.results.items() if result.tests_passed}
    wanted = {c.value for c in BASE_CAPABILITIES} | {Capability.PRUNE.value}
    assert wanted <= {getattr(c, "value", c) for c in ran}
