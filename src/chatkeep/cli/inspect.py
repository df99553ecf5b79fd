"""``chatkeep inspect``: serve the read-only web inspector (the ``inspect`` extra).

Starlette, Jinja2 and uvicorn are imported only when the command runs, so the rest of
the CLI starts as fast without them; missing, they are one red line naming the extra.
"""

from __future__ import annotations

import os
import secrets
from typing import Annotated

import typer

from chatkeep.cli.common import (
    DEFAULT_DB,
    ConfigOption,
    DbOption,
    TenantOption,
    console,
    explain_store_error,
    fail,
    parse_ref,
    require_existing,
)
from chatkeep.errors import ChatkeepError, StoreError

TOKEN_ENV = "CHATKEEP_INSPECT_TOKEN"


def inspect(db: DbOption = DEFAULT_DB,
            host: Annotated[str, typer.Option(
                help="Address to bind. Anything but loopback needs --token.")] = "127.0.0.1",
            port: Annotated[int, typer.Option(min=1, max=65535,
                                              help="Port to listen on.")] = 8765,
            tenant: TenantOption = None,
            token: Annotated[str | None, typer.Option(
                envvar=TOKEN_ENV, show_envvar=True,
                help="Require this token on every request (needed off loopback; "
                     "'generate' makes one).")] = None,
            reveal: Annotated[bool, typer.Option(
                "--reveal", help="Allow pages to reveal stored personal values, each "
                                 "request with the vault key and logged.")] = False,
            config: ConfigOption = None) -> None:
    """Serve a local, read-only web inspector over the store: sessions, the stored log
    beside what the model receives now, summaries and folds, memories, usage, redaction.
    Binds 127.0.0.1 by default; --tenant confines every page to one tenant."""
    from chatkeep.inspect import EXTRA_HINT, require_extra
    from chatkeep.inspect.security import require_token

    try:
        require_extra()
    except ImportError as exc:
        fail(f"{exc} (install it with: {EXTRA_HINT})")
    tenant_ref = parse_ref(tenant, "tenant")
    generated = token == "generate"
    if generated:
        token = secrets.token_urlsafe(24)
    try:
        require_token(host, token)
    except ChatkeepError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--host'") from exc
    require_existing(db)
    import uvicorn

    from chatkeep.inspect.app import open_app

    try:
        app, inspector = open_app(db, config_file=config, tenant=tenant_ref, reveal=reveal,
                                  host=host, token=token)
    except StoreError as exc:
        fail(explain_store_error(db, f"{type(exc).__name__}: {exc}"))
    except ChatkeepError as exc:
        fail(f"{type(exc).__name__}: {exc}")
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{port}/"
    console.print(f"chatkeep inspector (read-only) on [bold]{address}[/bold]"
                  + (f", confined to tenant {tenant_ref}" if tenant_ref else "")
                  + (", reveal allowed (logged)" if reveal else ""), highlight=False)
    if token and generated:
        console.print(f"open {address}?token={token} once to sign in", highlight=False,
                      soft_wrap=True)
    elif token:
        console.print(f"open {address}?token=<your token> once to sign in", highlight=False)
    try:
        uvicorn.run(app, host=host, port=port, log_level=os.environ.get(
            "CHATKEEP_INSPECT_LOG_LEVEL", "warning"), proxy_headers=False,
            server_header=False)
    finally:
        inspector.keep.close()
