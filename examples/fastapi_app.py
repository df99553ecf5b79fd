"""chatkeep in a FastAPI service: one ``AsyncChatkeep`` for the app's lifetime, the tenant
taken from the request's credentials (never from the body), and a streamed answer that is
recorded once the stream ends.

Install: ``pip install "chatkeep[aio,postgres]" fastapi uvicorn``. Serve it with
``uvicorn examples.fastapi_app:app_from_environment --factory`` (``DATABASE_URL`` and
``OPENAI_*`` from the environment). ``python examples/fastapi_app.py`` instead asks it one
question offline, through FastAPI's test client and chatkeep's fake of the OpenAI API, and
prints the answer and what the conversation holds. ``tests/recipes/`` runs it on both
stores; the docs' FastAPI recipe walks through it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Annotated

import openai
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from chatkeep import Ref, SessionNotFound
from chatkeep.aio import AsyncChatkeep, AsyncChatSession

SYSTEM = "You are a helpful support agent."

#: Stand-in for your auth: an API token -> (tenant, user). Use your real verifier here.
TOKENS: dict[str, tuple[Ref, Ref]] = {
    "token-acme-alice": (Ref("organization", "acme"), Ref("user", "alice")),
    "token-globex-bob": (Ref("organization", "globex"), Ref("user", "bob")),
}


class Caller(BaseModel):
    """Who is asking, as the credentials say."""

    model_config = {"arbitrary_types_allowed": True}
    tenant: Ref
    user: Ref


class Question(BaseModel):
    """The request body: only the text; the tenant never comes from the body."""

    text: str


def keep_of(request: Request) -> AsyncChatkeep:
    """The app's one keep (opened and closed by the lifespan)."""
    keep: AsyncChatkeep = request.app.state.keep
    return keep


def caller(request: Request, authorization: Annotated[str, Header()] = "") -> Caller:
    """The tenant and user the credentials name: a request never picks its tenant."""
    token = authorization.removeprefix("Bearer ").strip()
    tokens: Mapping[str, tuple[Ref, Ref]] = request.app.state.tokens
    if token not in tokens:
        raise HTTPException(401, "unknown token")
    tenant, user = tokens[token]
    return Caller(tenant=tenant, user=user)


Keep = Annotated[AsyncChatkeep, Depends(keep_of)]
Who = Annotated[Caller, Depends(caller)]


def create_app(database_url: str, client: openai.AsyncOpenAI, *, model: str = "gpt-4o-mini",
               tokens: Mapping[str, tuple[Ref, Ref]] = TOKENS,
               config: Mapping[str, object] | None = None) -> FastAPI:
    """The service, given its database and model client (the test passes fakes' URLs)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncChatkeep(database_url, model=client, config=config) as keep:
            app.state.keep = keep
            yield

    app = FastAPI(lifespan=lifespan)
    app.state.tokens = tokens

    async def conversation(keep: AsyncChatkeep, who: Caller, key: str) -> AsyncChatSession:
        # The app's own key names the conversation; the tenant scopes it.
        return await keep.sessions.open(key, tenant=who.tenant, actor=who.user)

    @app.post("/conversations/{key}/messages")
    async def ask(key: str, question: Question, keep: Keep, who: Who) -> StreamingResponse:
        session = await conversation(keep, who, key)
        await session.add_user(question.text)
        messages = await keep.compressor.build_history(session, SYSTEM)
        stream = await client.chat.completions.create(
            model=model, messages=list(messages), stream=True,
            stream_options={"include_usage": True})

        async def relay() -> AsyncIterator[str]:
            chunks = []
            async for chunk in stream:
                chunks.append(chunk)
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
            # The whole answer, once: text, tool calls and usage (billed to the tenant).
            await session.add_assistant_response(chunks)

        return StreamingResponse(relay(), media_type="text/plain")

    @app.get("/conversations/{key}")
    async def show(key: str, keep: Keep, who: Who) -> dict[str, object]:
        try:
            session = await keep.sessions.by_key(key, who.tenant)
        except SessionNotFound:
            raise HTTPException(404, "no such conversation") from None
        return {"key": session.key, "billed_tokens": session.total_tokens,
                "messages": [{"role": m.role.value, "content": m.content}
                             for m in await session.read_messages()]}

    return app


def app_from_environment() -> FastAPI:
    """The app with settings from the environment (uvicorn's ``--factory``)."""
    return create_app(os.environ.get("DATABASE_URL", "sqlite:///chat.db"), openai.AsyncOpenAI())


def offline_demo(database_url: str = "sqlite:///fastapi_app.db") -> None:
    """One question to the service, offline (the fake OpenAI server answers): what a
    client of the service sees, and what the conversation then holds."""
    from fastapi.testclient import TestClient

    from chatkeep.testing import FakeOpenAIServer, Reply

    with FakeOpenAIServer() as server:
        server.script(Reply.ok("Your refund is on its way."))
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="offline")
        alice = {"Authorization": "Bearer token-acme-alice"}
        with TestClient(create_app(database_url, client)) as http:
            answer = http.post("/conversations/support-1/messages", headers=alice,
                               json={"text": "My order arrived broken."})
            shown = http.get("/conversations/support-1", headers=alice).json()
    print(f"answer: {answer.text}")
    print(f"conversation {shown['key']!r}: {len(shown['messages'])} messages, "
          f"{shown['billed_tokens']} tokens billed")


if __name__ == "__main__":
    import sys

    offline_demo(*sys.argv[1:2])
