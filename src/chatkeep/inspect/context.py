"""What every view shares: the read-only store, the tenant it is confined to, the templates,
and the reading of request parameters (a malformed one is a 400 page, an unknown id 404).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from chatkeep.app import Chatkeep
from chatkeep.errors import ChatkeepError
from chatkeep.inspect.masking import Masker, masker_for, split_placeholders
from chatkeep.inspect.settings import DEFAULT
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.store.inspection_sessions import get_session, valid_id
from chatkeep.store.lifecycle import HoldRow
from chatkeep.store.rows import SessionRow

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def not_found(message: str) -> NoReturn:
    """Nothing of that id (in the confined tenant): a 404 page saying so."""
    raise HTTPException(404, message)


def bad_request(message: str) -> NoReturn:
    """A parameter that cannot be read: a 400 page saying which."""
    raise HTTPException(400, message)


class Inspector:
    """The state the views share: a read-only ``Chatkeep``, the tenant every query is
    confined to (``None``: all), whether values may be revealed at all, and where the
    budget of its config came from (``budget_origin``, shown beside the dry run)."""

    def __init__(self, keep: Chatkeep, *, tenant: Ref | None = None,
                 reveal: bool = False, budget_origin: str = "the inspector's config") -> None:
        self.keep = keep
        self.engine = keep.engine
        self.tenant = tenant
        self.reveal = reveal
        self.budget_origin = budget_origin
        self.templates = _environment()

    @property
    def budget(self) -> int:
        """``chat.max_history_tokens``."""
        return self.keep.config.chat.max_history_tokens

    @property
    def budget_is_default(self) -> bool:
        """Whether nothing set the budget (so it may not be the application's)."""
        return self.budget_origin == DEFAULT

    def redacts(self, row: SessionRow) -> bool:
        """Whether the session's text leaves redacted under this config, by the library's
        own rule (``PrivacyGuard.redacts``, as ``chatkeep sessions show`` asks it)."""
        return self.keep.privacy.redacts(ChatSession(self.keep.repository, row))

    def redaction(self, row: SessionRow) -> str:
        """:meth:`redacts` in words, naming the switch that decides when it does not."""
        if self.redacts(row):
            return "redacted" + (" (protected)" if row.pii_protected else "")
        if not row.anonymize_pii:
            return "not redacted (the session's switch is off)"
        return "not redacted (the application's switch, privacy.anonymize_pii, is off)"

    @property
    def vault_key(self) -> str | None:
        """``privacy.encryption_key`` (opens stored mappings to number placeholders)."""
        return self.keep.config.privacy.encryption_key

    def session(self, session_id: str) -> SessionRow:
        """The session, within the confined tenant (else a 404)."""
        row = get_session(self.engine, session_id, self.tenant)
        if row is None:
            not_found(f"no session {session_id!r}"
                      + (f" in tenant {self.tenant}" if self.tenant else ""))
        return row

    def masker(self, sealed: str | None) -> Masker:
        """The display masker over a stored mapping (a session's vault, a memory's values)."""
        return masker_for(self.keep.privacy.redactor, sealed, self.vault_key)

    def labels(self, row: SessionRow, masker: Masker | None = None) -> tuple[str, str]:
        """The session's app key and title as a page shows them: masked like its
        messages, under its own stored mapping (``masker``: the page's, when it has one;
        a revealed page's shows them as stored). ``""`` for what the session lacks."""
        shown = masker if masker is not None else self.masker(row.pii_vault)
        return shown.text(row.key), shown.text(row.title)

    def holds_on(self, row: SessionRow) -> list[HoldRow]:
        """The active legal holds covering the session of ``row`` (the header shows them)."""
        return self.keep.lifecycle.list_holds(row.tenant, session_id=row.id)

    def tenant_filter(self, request: Request) -> Ref | None:
        """The ``tenant`` parameter, within the confinement: a confined inspector reads
        only its tenant, whatever is asked (another one is a 400)."""
        asked = ref_param(request, "tenant")
        if self.tenant is not None:
            if asked is not None and asked != self.tenant:
                bad_request(f"this inspector is confined to tenant {self.tenant}")
            return self.tenant
        return asked

    def render(self, request: Request, name: str, status: int = 200,
               **context: Any) -> HTMLResponse:
        """``templates/name`` rendered with the shared context."""
        template = self.templates.get_template(name)
        html = template.render(request=request, inspector=self, confined=self.tenant,
                               htmx=request.headers.get("hx-request") == "true",
                               qs=lambda **changes: query_with(request, **changes),
                               **context)
        return HTMLResponse(html, status_code=status,
                            headers={"cache-control": "no-store"})


def query_with(request: Request, **changes: Any) -> str:
    """The current query string with ``changes`` (``None`` removes a parameter)."""
    params = {k: v for k, v in request.query_params.items()}
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    return "?" + urlencode(params) if params else "?"


def text_param(request: Request, name: str, *, limit: int = 500) -> str | None:
    """A text parameter (blank = absent); too long or holding a NUL is a 400."""
    value = request.query_params.get(name)
    if value is None or not value.strip():
        return None
    if len(value) > limit or "\x00" in value:
        bad_request(f"{name}: too long or not text")
    return value.strip()


def ref_param(request: Request, name: str) -> Ref | None:
    """A ``TYPE:ID`` parameter as a ``Ref``; malformed is a 400 naming it."""
    value = text_param(request, name)
    if value is None:
        return None
    try:
        return Ref.parse(value)
    except ChatkeepError as exc:
        bad_request(f"{name}: {exc}")


def int_param(request: Request, name: str, *, minimum: int = 0) -> int | None:
    """A whole-number parameter; anything else is a 400 naming it."""
    value = text_param(request, name, limit=20)
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or int(value) < minimum:
        bad_request(f"{name}: expected a whole number from {minimum}, got {value!r}")
    return int(value)


def date_param(request: Request, name: str) -> datetime | None:
    """A date (``2026-11-01``) or ISO date-time parameter, UTC unless it says."""
    value = text_param(request, name, limit=40)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        bad_request(f"{name}: expected a date like 2026-11-01, got {value!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def choice_param(request: Request, name: str, choices: tuple[str, ...] | list[str],
                 default: str | None = None) -> str | None:
    """One of ``choices``; anything else is a 400."""
    value = text_param(request, name, limit=100)
    if value is None:
        return default
    if value not in choices:
        bad_request(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def highlight(text: str | None) -> Markup:
    """Text escaped, placeholders marked up (``<mark class="ph">``)."""
    if not text:
        return Markup("")
    return Markup("").join(
        Markup('<mark class="ph">{}</mark>').format(piece) if is_placeholder
        else escape(piece) for piece, is_placeholder in split_placeholders(text))


def _when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)),
                      autoescape=select_autoescape(["html"]), trim_blocks=True,
                      lstrip_blocks=True)
    env.filters.update(ph=highlight, when=_when, num=_number, pretty=_pretty,
                       short=lambda s: (s or "")[:13])
    env.globals.update(svg=Markup)
    return env


def inspector_of(request: Request) -> Inspector:
    """The inspector the application serves."""
    inspector: Inspector = request.app.state.inspector
    return inspector


def client_of(request: Request) -> str:
    """Who asked, for the audit log."""
    return f"{request.client.host}:{request.client.port}" if request.client else "unknown"


async def form_fields(request: Request) -> dict[str, str]:
    """The fields of a small url-encoded form post (the reveal forms)."""
    body = await request.body()
    if len(body) > 8192:
        bad_request("form too large")
    return dict(parse_qsl(body.decode("utf-8", "replace")))


async def form_field(request: Request, name: str) -> str:
    """One field of a small url-encoded form post (the reveal form); "" when absent."""
    return (await form_fields(request)).get(name, "")


def id_param(request: Request, name: str) -> str | None:
    """A session id parameter: one that cannot be an id is not found (404), like one that
    names nothing."""
    value = request.query_params.get(name)
    if value is None or not value.strip():
        return None
    if not valid_id(value.strip()):
        not_found(f"no session {value[:80]!r}")
    return value.strip()
