"""``Chatkeep``: the facade that wires store, model, compressor and dispatcher together.

Every part is usable alone; this is the short path::

    keep = Chatkeep("sqlite:///chat.db")
    session = keep.sessions.create(tenant=Ref("organization", 7))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from chatkeep.config import Config
from chatkeep.history.compressor import HistoryCompressor
from chatkeep.jobs import Dispatcher, make_dispatcher
from chatkeep.llm.base import ChatModel, as_chat_model
from chatkeep.llm.openai_client import model_from_config
from chatkeep.memory import DISTIL_JOB, MemoryService
from chatkeep.privacy.detector import Recognizer
from chatkeep.privacy.guard import PrivacyGuard
from chatkeep.refs import Ref, require_ref
from chatkeep.sessions import SessionService
from chatkeep.store.engine import make_engine
from chatkeep.store.repository import Repository, UsageLine
from chatkeep.tokens import HeuristicCounter, TokenCounter


class Chatkeep:
    """Durable multi-tenant chat sessions with a budgeted history.

    ``model``: an ``openai.OpenAI`` client or a ``ChatModel`` for summaries; ``None`` uses
    ``llm`` config / ``OPENAI_*`` env when set, and the offline extractive summariser when not.
    ``config``: a ``Config`` or a dict of sections (merged over TOML file and env).
    ``create_schema``: create missing tables (the embedded default; use migrations in production).
    ``recognizers``: your own PII ``Recognizer`` objects, run beside the built-in ones.
    """

    def __init__(self, database_url: str, *, model: Any = None,
                 config: Config | Mapping[str, Any] | None = None,
                 dispatcher: str | Dispatcher | None = None,
                 counter: TokenCounter | None = None, create_schema: bool = True,
                 recognizers: Sequence[Recognizer] = ()) -> None:
        self.config = Config.load(config)
        self.counter = counter or HeuristicCounter()
        self.engine = make_engine(database_url)
        self.repository = Repository(self.engine)
        if create_schema:
            self.repository.create_schema()
        self.model: ChatModel | None = (
            as_chat_model(model) if model is not None else model_from_config(self.config.llm))
        self.sessions = SessionService(self.repository, self.counter)
        self.privacy = PrivacyGuard(self.config.privacy, self.repository, list(recognizers))
        self.compressor = HistoryCompressor(self.model, config=self.config.chat,
                                            counter=self.counter, outbound_filter=self.privacy)
        self.dispatcher = make_dispatcher(dispatcher)
        self.memory = MemoryService(self.repository, self.model, sessions=self.sessions,
                                    dispatcher=self.dispatcher, config=self.config.memory,
                                    language=self.config.chat.language, counter=self.counter,
                                    outbound_filter=self.privacy)
        if self.config.memory.distil_on_compress and self.model is not None:
            # (Offline there is nothing to distil with; the sweep catches up once a model
            # is configured.)
            self.compressor.on_compress.append(self.memory.dispatch_distil)
        if self.config.memory.recall_in_history:
            self.compressor.memory_provider = self.memory.provider
        self.dispatcher.bind(self.job_handlers())

    def job_handlers(self) -> dict[str, Any]:
        """Job name -> handler taking a session id (what dispatchers and workers run)."""
        return {DISTIL_JOB: self.memory.run_job}

    def usage(self, tenant: Ref | None = None, *, since: datetime | None = None,
              until: datetime | None = None) -> list[UsageLine]:
        """Token usage by tenant, purpose and model (billing is this one query)."""
        if tenant is not None:
            require_ref(tenant, "tenant")
        return self.repository.usage_report(tenant, since=since, until=until)

    def close(self) -> None:
        """Release database connections and background threads."""
        shutdown = getattr(self.dispatcher, "shutdown", None)
        if callable(shutdown):
            shutdown()
        self.engine.dispose()

    def __enter__(self) -> Chatkeep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
