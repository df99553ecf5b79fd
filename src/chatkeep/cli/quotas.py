"""``chatkeep quotas``: set, show, list and clear per-tenant token quotas, and sweep the
reservations whose lease ended (docs/quotas.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from chatkeep.cli.common import (
    DEFAULT_DB,
    DbOption,
    JsonOption,
    console,
    open_keep,
    parse_ref,
    print_json,
    ref_json,
    ref_option,
    safe,
)
from chatkeep.quotas import Quota

quotas_app = typer.Typer(help="Token quotas per tenant (or actor), refused before the call.",
                         no_args_is_help=True)
TenantRequired = Annotated[str, typer.Option("--tenant", help="The tenant, as TYPE:ID.",
                                             show_default=False)]
ActorOption = Annotated[str | None, typer.Option(
    "--actor", help="Narrow to one actor of the tenant, as TYPE:ID.")]


def quota_json(quota: Quota) -> dict[str, Any]:
    """A quota as ``--json`` prints it."""
    return {"tenant": ref_json(quota.tenant), "actor": ref_json(quota.actor),
            "tokens": quota.tokens, "window": quota.window, "spent": quota.spent,
            "reserved": quota.reserved, "remaining": quota.remaining,
            "resets_at": quota.resets_at.isoformat(), "default": quota.default}


def _line(quota: Quota) -> str:
    who = safe(quota.tenant) + (f" actor {safe(quota.actor)}" if quota.actor else "")
    return (f"{who}: {quota.tokens} tokens per {quota.window} · spent {quota.spent} · "
            f"reserved {quota.reserved} · remaining {quota.remaining} · resets "
            f"{quota.resets_at.isoformat(timespec='seconds')}"
            + (" (config default)" if quota.default else ""))


@quotas_app.command("set")
def set_quota(tenant: TenantRequired,
              tokens: Annotated[int, typer.Option("--tokens", min=0,
                                                  help="Tokens per window.")],
              window: Annotated[str, typer.Option(
                  "--window", help="day, month (UTC) or a rolling length: 30m, 24h, 7d.")
              ] = "day",
              actor: ActorOption = None, as_json: JsonOption = False,
              db: DbOption = DEFAULT_DB) -> None:
    """Limit a tenant (or one of its actors) to a number of tokens per window."""
    tenant_ref = ref_option(tenant, "tenant")
    actor_ref = parse_ref(actor, "actor")
    with open_keep(db, existing=True) as keep:
        quota = keep.quotas.set(tenant_ref, tokens=tokens, window=window, actor=actor_ref)
        if as_json:
            print_json(quota_json(quota))
        else:
            console.print(_line(quota))


@quotas_app.command("get")
def get_quota(tenant: TenantRequired, actor: ActorOption = None, as_json: JsonOption = False,
              db: DbOption = DEFAULT_DB) -> None:
    """The quota in force for a tenant (or an actor): spent, reserved, remaining."""
    tenant_ref = ref_option(tenant, "tenant")
    actor_ref = parse_ref(actor, "actor")
    with open_keep(db, existing=True) as keep:
        quota = keep.quotas.get(tenant_ref, actor=actor_ref)
        if as_json:
            print_json(None if quota is None else quota_json(quota))
        elif quota is None:
            console.print(f"no quota for {safe(tenant_ref)}"
                          + (f" actor {safe(actor_ref)}" if actor_ref else ""))
        else:
            console.print(_line(quota))


@quotas_app.command("list")
def list_quotas(tenant: Annotated[str | None, typer.Option(
                    "--tenant", help="Only this tenant's (TYPE:ID).")] = None,
                as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """Every stored quota (or one tenant's: its own and its actors')."""
    tenant_ref = parse_ref(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        quotas = keep.quotas.list(tenant_ref)
        if as_json:
            print_json([quota_json(q) for q in quotas])
            return
        if not quotas:
            console.print("no quotas")
        for quota in quotas:
            console.print(_line(quota))


@quotas_app.command("clear")
def clear_quota(tenant: TenantRequired, actor: ActorOption = None, as_json: JsonOption = False,
                db: DbOption = DEFAULT_DB) -> None:
    """Remove a tenant's (or an actor's) quota: the config's default applies again."""
    tenant_ref = ref_option(tenant, "tenant")
    actor_ref = parse_ref(actor, "actor")
    with open_keep(db, existing=True) as keep:
        removed = keep.quotas.clear(tenant_ref, actor=actor_ref)
        if as_json:
            print_json({"removed": removed})
        else:
            console.print(f"{'removed' if removed else 'there was no'} quota for "
                          f"{safe(tenant_ref)}" + (f" actor {safe(actor_ref)}"
                                                   if actor_ref else ""))


@quotas_app.command("sweep")
def sweep_reservations(as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """End the reservations whose lease ended (a worker killed mid-call): counted at
    their reserved amount, or released (quotas.count_expired). A rerun does nothing."""
    with open_keep(db, existing=True) as keep:
        ended = keep.quotas.sweep()
        if as_json:
            print_json({"ended": ended})
        else:
            console.print(f"ended {ended} reservation{'' if ended == 1 else 's'}")
