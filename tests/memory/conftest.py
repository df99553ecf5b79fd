"""Memory fixtures: ``player`` plays the model on the fake server; ``mkeep`` uses it."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest
from memory_helpers import Player

from chatkeep import Chatkeep
from chatkeep.testing import FakeOpenAIServer


@pytest.fixture
def player(llm_server: FakeOpenAIServer) -> Player:
    p = Player()
    llm_server.responder = p
    return p


@pytest.fixture
def mkeep(make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI,
          player: Player) -> Chatkeep:
    """A ``Chatkeep`` whose model is the fake server played by ``player``."""
    return make_keep(model=openai_client)
