"""The OpenAI-compatible client through the real SDK: completions, the egress guard, errors
and the model chosen by config."""

from __future__ import annotations

import openai
import pytest

from chatkeep import ConfigError, ModelError, PrivacyError
from chatkeep.config import LLMConfig
from chatkeep.llm import OpenAIChatModel, as_chat_model, model_from_config
from chatkeep.messages import Usage
from chatkeep.privacy.egress import OPEN, bound
from chatkeep.testing import FakeOpenAIServer, Reply


def test_completion_through_the_sdk(llm_server: FakeOpenAIServer,
                                    openai_client: openai.OpenAI) -> None:
    model = as_chat_model(openai_client)
    llm_server.script(Reply.ok("hello", prompt_tokens=7, completion_tokens=2))
    with bound(OPEN):  # chatkeep's models only send through an egress
        completion = model.complete([{"role": "user", "content": "hi"}], model="m",
                                    max_tokens=10, temperature=0.0, json_mode=True)
    assert (completion.text, completion.usage, completion.model) == ("hello", Usage(7, 2), "m")
    (request,) = llm_server.requests
    assert request["response_format"] == {"type": "json_object"}
    assert request["max_tokens"] == 10 and request["messages"][0]["content"] == "hi"


def test_a_model_call_outside_any_egress_is_refused_before_it_is_sent(
        llm_server: FakeOpenAIServer, openai_client: openai.OpenAI) -> None:
    with pytest.raises(PrivacyError, match="egress"):
        as_chat_model(openai_client).complete([{"role": "user", "content": "hi"}], model="m")
    assert llm_server.requests == []


@pytest.mark.parametrize("reply", [Reply.error(500), Reply.error(401, "bad key"),
                                   Reply.garbage(), Reply.ok(""), Reply.hang(2.0)])
def test_failures_become_model_errors(llm_server: FakeOpenAIServer, reply: Reply) -> None:
    model = OpenAIChatModel(base_url=llm_server.base_url, api_key="k", timeout=0.5,
                            max_retries=0)
    llm_server.script(reply)
    with pytest.raises(ModelError):
        model.complete([{"role": "user", "content": "hi"}], model="m")


def test_model_from_config_is_offline_without_an_endpoint(llm_server: FakeOpenAIServer) -> None:
    assert model_from_config(LLMConfig(), environ={}) is None
    model = model_from_config(LLMConfig(base_url=llm_server.base_url), environ={})
    assert model is not None
    assert model.complete([{"role": "user", "content": "x"}], model="m").text == "ok"
    with pytest.raises(ConfigError, match="expected a chatkeep ChatModel"):
        as_chat_model(object())
