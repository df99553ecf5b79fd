"""chatkeep's own model calls reserve on the tenant's quota too: a distillation with no
quota left sends nothing and leaves its range for the sweep to retry; with room again it
is made and settled at its real usage."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from chatkeep import Chatkeep, DistillationError, Ref
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 1)


def test_a_distillation_with_no_quota_left_sends_nothing_and_is_retried(
        make_keep: Callable[..., Chatkeep], llm_server: FakeOpenAIServer,
        openai_client: openai.OpenAI) -> None:
    keep = make_keep(model=openai_client, config={"memory": {"distil_on_compress": False}})
    session = keep.sessions.create(ORG, Ref("user", 1))
    session.add_user("Our warehouse is in Lyon.")
    session.add_assistant("Noted: the warehouse is in Lyon.")
    keep.quotas.set(ORG, tokens=500)  # less than the distiller's output ceiling
    with pytest.raises(DistillationError, match="refused for quota"):
        keep.memory.distil(session)
    assert llm_server.requests == []
    assert keep.sessions.get(session.id, ORG).row.distilled_through == 0  # left to retry
    assert keep.quotas.get(ORG).reserved == 0  # type: ignore[union-attr]

    keep.quotas.set(ORG, tokens=100_000)
    llm_server.script(Reply.json({"facts": [{"scope": "tenant",
                                             "content": "The warehouse is in Lyon."}]},
                                 prompt_tokens=300, completion_tokens=30))
    keep.memory.distil(session)
    assert len(llm_server.requests) == 1
    assert keep.sessions.get(session.id, ORG).row.distilled_through == 2
    quota = keep.quotas.get(ORG)
    assert quota is not None and (quota.spent, quota.reserved) == (330, 0)
