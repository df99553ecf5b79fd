"""The usage ledger: by tenant, session, purpose and model, over time (inline SVG), each
table exportable as CSV, and the reconciliation of the ledger with the sessions' totals;
each tenant's quotas as they stand now (limit, spent, reserved, reservations in flight).
Sessions' app keys and titles are masked like their text (a keyed reveal shows them);
tenants and actors are the application's references, shown as on the rest of the page."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from chatkeep.inspect.context import (
    Inspector,
    bad_request,
    choice_param,
    date_param,
    id_param,
    text_param,
)
from chatkeep.inspect.masking import Masker, Reveal
from chatkeep.inspect.routes.reveal import list_page_routes
from chatkeep.inspect.svg import bars, stacked_columns
from chatkeep.quotas.windows import epoch, from_epoch, stored_window
from chatkeep.store.inspection_quotas import QuotaLine, quota_lines
from chatkeep.store.inspection_usage import (
    BUCKETS,
    UsageFilter,
    UsageRow,
    ledger_lines,
    reconcile,
    usage_by,
    usage_choices,
    usage_over_time,
)

TABLES = ("tenants", "purposes", "models", "sessions", "time", "ledger", "quotas")
#: Rows of a table shown on the page (its CSV has them all, up to ``CSV_ROWS``).
SHOWN = 50
CSV_ROWS = 100_000
TOKENS = ["calls", "prompt_tokens", "completion_tokens", "total_tokens"]


def _tables(ins: Inspector, f: UsageFilter, bucket: str, limit: int, *,
            revealed: bool = False) -> dict[str, tuple[list[str], list[list[Any]]]]:
    """Every table of the page as (header, rows): at most ``limit`` rows of those that
    grow with the data (tenants, models, sessions, ledger lines); every purpose and
    period. Sessions' keys and titles are masked under each one's mapping unless
    ``revealed``."""
    engine = ins.engine

    def labels(r: UsageRow) -> list[str]:
        masker = Masker(None) if revealed else ins.masker(r.key[3])
        return [masker.text(r.key[1]), masker.text(r.key[2])]

    def sums(row: UsageRow) -> list[Any]:
        return [row.calls, row.prompt_tokens, row.completion_tokens, row.total_tokens]

    tenants = usage_by(engine, f, "tenant", limit=limit)
    purposes = usage_by(engine, f, "purpose")
    models = usage_by(engine, f, "model", limit=limit)
    sessions = usage_by(engine, f, "session", limit=limit)
    time = usage_over_time(engine, f, bucket)
    ledger = ledger_lines(engine, f, limit=limit)
    now = epoch(ins.keep.quotas.clock())
    quotas = quota_lines(engine, f.tenant, now, limit=limit)
    return {
        "tenants": (["tenant", *TOKENS],
                    [[f"{r.key[0]}:{r.key[1]}", *sums(r)] for r in tenants]),
        "purposes": (["purpose", *TOKENS], [[r.key[0], *sums(r)] for r in purposes]),
        "models": (["model", *TOKENS], [[r.key[0] or "-", *sums(r)] for r in models]),
        "sessions": (["session", "key", "title", *TOKENS],
                     [[r.key[0], *labels(r), *sums(r)] for r in sessions]),
        "time": ([bucket, "purpose", *TOKENS], [[r.key[0], r.key[1], *sums(r)]
                                                 for r in time]),
        "ledger": (["created_at", "session", "tenant", "purpose", "model", "prompt_tokens",
                    "completion_tokens"],
                   [[line.created_at.isoformat(), line.session_id, str(line.tenant),
                     line.purpose, line.model or "", line.prompt_tokens,
                     line.completion_tokens] for line in ledger]),
        "quotas": (QUOTA_HEADER, [quota_row(q, now) for q in quotas]),
    }


QUOTA_HEADER = ["tenant", "actor", "window", "quota_tokens", "spent_tokens",
                "reserved_tokens", "remaining_tokens", "reservations", "expired", "resets_at"]


def quota_row(q: QuotaLine, now: int) -> list[Any]:
    """A quota as a row of the page: what its current window spent (0 once the stored
    one ended), what is reserved, the reservations in flight (``expired``: past their
    lease, waiting for the sweep) and when the window resets (a rolling window that
    ended restarts with its next reservation)."""
    window = stored_window(q.window_kind, q.window_seconds)
    if not q.rolled:
        resets = from_epoch(q.window_end).isoformat()
    elif q.window_kind == "rolling":
        resets = "with its next call"
    else:
        resets = from_epoch(window.end_after(now)).isoformat()
    return [str(q.tenant), str(q.actor) if q.actor else "", str(window), q.tokens, q.spent,
            q.reserved, q.remaining, q.held, q.expired, resets]


def _csv(name: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Response:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(v) for v in row])
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8", headers={
        "content-disposition": f'attachment; filename="chatkeep-usage-{name}.csv"',
        "cache-control": "no-store"})


def _cell(value: Any) -> Any:
    """A cell that a spreadsheet will not run as a formula."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _time_chart(rows: list[list[Any]]) -> str:
    buckets = sorted({r[0] for r in rows})
    purposes = sorted({r[1] for r in rows})
    index = {b: i for i, b in enumerate(buckets)}
    series = []
    for purpose in purposes:
        values = [0] * len(buckets)
        for r in rows:
            if r[1] == purpose:
                values[index[r[0]]] += int(r[5])
        series.append((purpose, values))
    return stacked_columns(buckets, series) if buckets else ""


def usage_page(request: Request, ins: Inspector, *, reveal: Reveal | None = None,
               form: dict[str, str] | None = None, status: int = 200) -> Response:
    """``GET /usage`` (``?csv=TABLE`` for one table as CSV); ``POST`` with the vault key:
    the page, or the CSV its ``csv`` field names, with keys and titles as stored."""
    session_id = id_param(request, "session")
    if session_id is not None:
        ins.session(session_id)  # another tenant's session is not found
    f = UsageFilter(
        tenant=ins.tenant_filter(request), session_id=session_id,
        purpose=text_param(request, "purpose", limit=16),
        model=text_param(request, "model", limit=255),
        since=date_param(request, "since"), until=date_param(request, "until"))
    bucket = choice_param(request, "bucket", list(BUCKETS), "day") or "day"
    revealed = reveal is not None and reveal.granted
    wanted = choice_param(request, "csv", TABLES)
    if revealed and form and form.get("csv"):
        wanted = form["csv"] if form["csv"] in TABLES else bad_request(
            f"csv: expected one of {', '.join(TABLES)}")
    if wanted is not None and (reveal is None or revealed):
        header, rows = _tables(ins, f, bucket, CSV_ROWS, revealed=revealed)[wanted]
        return _csv(wanted, header, rows)
    tables = _tables(ins, f, bucket, SHOWN + 1, revealed=revealed)
    shown = {name: (header, rows[:SHOWN], len(rows) > SHOWN)
             for name, (header, rows) in tables.items()}
    totals = [sum(int(r[i]) for r in tables["purposes"][1]) for i in (1, 2, 3, 4)]
    purposes, models = usage_choices(ins.engine, f.tenant)
    return ins.render(
        request, "usage.html", status, f=f, bucket=bucket, buckets=list(BUCKETS),
        tables=shown, totals=totals, purposes=purposes, models=models,
        time_chart=_time_chart(tables["time"][1]),
        time_purposes=sorted({r[1] for r in tables["time"][1]}),
        purpose_chart=bars([(str(r[0]), int(r[4])) for r in tables["purposes"][1]]),
        model_chart=bars([(str(r[0]), int(r[4])) for r in tables["models"][1][:12]]),
        recon=reconcile(ins.engine, f.tenant, f.session_id),
        filtered=any((f.purpose, f.model, f.since, f.until)), revealed=revealed,
        reveal_message=reveal.message if reveal else None, csv_tables=TABLES,
        quota_default=_default_quota(ins), title="Usage")


def _default_quota(ins: Inspector) -> str | None:
    """The config's quota for a tenant without its own (``None``: not limited)."""
    config = ins.keep.config.quotas
    if config.default_tokens is None:
        return None
    return f"{config.default_tokens:,} tokens per {config.default_window}"


ROUTES = list_page_routes("/usage", "usage", "usage", usage_page)
