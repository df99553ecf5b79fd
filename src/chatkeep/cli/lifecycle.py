"""``chatkeep sessions delete``, ``erase``, ``holds place|release|list``,
``retention set|show|clear|sweep`` and ``db vacuum``: forgetting, from the command line
(docs/forgetting.md).

``erase --dry-run`` prints the plan and writes nothing; ``erase`` prints (or with
``--receipt FILE`` writes) the receipt; ``erase --verify FILE`` checks one against the
database and exits 1 when it does not verify.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from chatkeep.cli.common import (
    DEFAULT_DB,
    DbOption,
    JsonOption,
    console,
    fail,
    open_keep,
    parse_ref,
    print_json,
    ref_option,
    require_existing,
    safe,
)
from chatkeep.cli.sessions import SessionIdArg, find_session
from chatkeep.errors import ChatkeepError, InvalidArgument
from chatkeep.store.engine import make_engine

if TYPE_CHECKING:
    # Forgetting's modules load when a command of this file runs: every other command
    # starts without them (issue 32 item 11).
    from chatkeep.store.lifecycle import HoldRow

holds_app = typer.Typer(help="Legal holds: a held scope refuses delete, erase and retention.",
                        no_args_is_help=True)
retention_app = typer.Typer(help="Retention per tenant: what the sweep deletes, and the sweep.",
                            no_args_is_help=True)
TenantRequired = Annotated[str, typer.Option("--tenant", help="The tenant, as TYPE:ID.",
                                             show_default=False)]
ByOption = Annotated[str | None, typer.Option(
    "--by", help="Who asks (an operator's id, for the lifecycle log).")]


def hold_json(hold: HoldRow) -> dict[str, Any]:
    """A hold as JSON: its scope, reason and times."""
    return {"id": hold.id, "tenant": str(hold.tenant), "kind": hold.kind,
            "actor": str(hold.actor) if hold.actor else None,
            "subject": str(hold.subject) if hold.subject else None,
            "session_id": hold.session_id, "reason": hold.reason, "placed_by": hold.placed_by,
            "placed_at": hold.placed_at.isoformat(),
            "released_at": hold.released_at.isoformat() if hold.released_at else None}


def delete_session(session_id: SessionIdArg, tenant: TenantRequired, by: ByOption = None,
                   as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """Delete one conversation and every row holding its content (messages, tool calls,
    summary and folds, vault, key, title, metadata, the memories from it that carry its
    values); the usage ledger keeps its numbers. Refused under a legal hold."""
    tenant_ref = ref_option(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        session = find_session(keep, session_id, tenant_ref)
        counts = keep.sessions.delete(session.id, tenant_ref, by=by)
        if as_json:
            print_json({"session_id": session.id, "deleted": counts})
            return
        console.print(f"deleted session {session.id}: " + ", ".join(
            f"{n} {surface}" for surface, n in counts.items() if n))


def erase(tenant: Annotated[str | None, typer.Option(
              "--tenant", help="The tenant, as TYPE:ID.", show_default=False)] = None,
          actor: Annotated[str | None, typer.Option(
              help="Erase this actor (a person), TYPE:ID.")] = None,
          subject: Annotated[str | None, typer.Option(
              help="Erase this subject (a matter), TYPE:ID.")] = None,
          whole_tenant: Annotated[bool, typer.Option(
              "--whole-tenant", help="Erase everything the tenant has.")] = False,
          dry_run: Annotated[bool, typer.Option(
              "--dry-run", help="Print what would be erased; write nothing.")] = False,
          receipt: Annotated[Path | None, typer.Option(
              "--receipt", help="Write the receipt (canonical JSON) to this file.",
              dir_okay=False)] = None,
          verify_file: Annotated[Path | None, typer.Option(
              "--verify", help="Check this receipt against the database instead (exit "
                               "code 1 when it does not verify).", dir_okay=False)] = None,
          by: ByOption = None,
          batch_size: Annotated[int, typer.Option(
              min=1, max=100_000, help="Rows per batch (memory follows it).")] = 1000,
          as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """Erase an actor, a subject or a whole tenant: conversations, summaries, vaults,
    memories with their vectors and text index, the bytes gone from disk. Resumable: a
    run that was killed finishes when run again. Prints the receipt (no personal
    content); check one later with `chatkeep erase --verify FILE`."""
    if verify_file is not None:
        _verify(verify_file, as_json, db)
        return
    if tenant is None:
        fail("erase needs --tenant (or --verify FILE)")
    tenant_ref = ref_option(tenant, "tenant")
    actor_ref, subject_ref = parse_ref(actor, "actor"), parse_ref(subject, "subject")
    with open_keep(db, existing=True) as keep:
        if dry_run:
            plan = keep.plan_erasure(tenant_ref, actor=actor_ref, subject=subject_ref,
                                     whole_tenant=whole_tenant)
            if as_json:
                print_json(plan.to_dict())
            else:
                for line in plan.describe():
                    console.print(safe(line), soft_wrap=True)
            return
        done = keep.erase(tenant_ref, actor=actor_ref, subject=subject_ref,
                          whole_tenant=whole_tenant, by=by, batch_size=batch_size)
        if receipt is not None:
            try:
                receipt.write_text(done.to_json() + "\n", encoding="utf-8")
            except OSError as exc:
                fail(f"cannot write the receipt to {receipt}: {exc}")
        if as_json or receipt is None:
            print_json(done.to_dict())
        else:
            console.print(f"erased {done.total} rows of {safe(tenant_ref)}; receipt "
                          f"{done.erasure_id} written to {receipt}", soft_wrap=True)


def _verify(file: Path, as_json: bool, db: str) -> None:
    """Check an erasure receipt against the database: its digest, the database's own
    record of that erasure, and nothing of the erased scope left. Exit code 1 when it
    does not verify."""
    from chatkeep.lifecycle import ErasureReceipt

    with open_keep(db, existing=True) as keep:
        try:
            check = keep.verify_erasure(ErasureReceipt.from_json(
                file.read_text(encoding="utf-8")))
        except OSError as exc:
            fail(f"cannot read {file}: {exc}")
        if as_json:
            print_json({"verified": check.ok, "problems": check.problems})
        elif check.ok:
            console.print(f"verified: {safe(file)}")
        else:
            for problem in check.problems:
                console.print(f"[red]{safe(problem)}[/red]", soft_wrap=True)
        if not check.ok:
            raise typer.Exit(1)


@holds_app.command("place")
def place(tenant: TenantRequired,
          reason: Annotated[str, typer.Option(help="Why (shown in every refusal).",
                                              show_default=False)],
          actor: Annotated[str | None, typer.Option(help="Hold this actor, TYPE:ID.")] = None,
          subject: Annotated[str | None, typer.Option(
              help="Hold this subject, TYPE:ID.")] = None,
          session: Annotated[str | None, typer.Option(
              help="Hold this session (id, unique prefix or key).")] = None,
          by: ByOption = None, as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """Place a legal hold on an actor, a subject or a session (none of them: the whole
    tenant)."""
    tenant_ref = ref_option(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        session_id = find_session(keep, session, tenant_ref).id if session else None
        hold = keep.holds.place(tenant_ref, actor=parse_ref(actor, "actor"),
                                subject=parse_ref(subject, "subject"), session_id=session_id,
                                reason=reason, by=by)
        if as_json:
            print_json(hold_json(hold))
        else:
            console.print(f"placed {safe(hold.describe())}: {safe(hold.reason)}")


@holds_app.command("release")
def release(hold_id: Annotated[int, typer.Argument(help="The hold's id.", show_default=False)],
            tenant: TenantRequired, by: ByOption = None, as_json: JsonOption = False,
            db: DbOption = DEFAULT_DB) -> None:
    """Release a legal hold."""
    tenant_ref = ref_option(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        hold = keep.holds.release(tenant_ref, hold_id, by=by)
        if as_json:
            print_json(hold_json(hold))
        else:
            console.print(f"released {safe(hold.describe())}")


@holds_app.command("list")
def list_holds(tenant: TenantRequired,
               released: Annotated[bool, typer.Option(
                   "--released", help="Include released holds.")] = False,
               as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """A tenant's legal holds, newest first."""
    tenant_ref = ref_option(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        holds = keep.holds.list(tenant_ref, include_released=released)
        if as_json:
            print_json([hold_json(h) for h in holds])
            return
        if not holds:
            console.print(f"no holds for {safe(tenant_ref)}")
        for hold in holds:
            state = "active" if hold.active else f"released {hold.released_at:%Y-%m-%d}"
            console.print(f"{safe(hold.describe())} · {state} · {safe(hold.reason)}",
                          soft_wrap=True)


def vacuum_db(full: Annotated[bool, typer.Option(
                  "--full", help="PostgreSQL: VACUUM FULL (rewrites each table, locking "
                                 "it) instead of VACUUM.")] = False,
              db: DbOption = DEFAULT_DB) -> None:
    """Reclaim the space of deleted rows: SQLite VACUUM (the file is rewritten) and a WAL
    truncate; PostgreSQL VACUUM on chatkeep's tables (dead row versions become free
    space; with --full the tables are rewritten and the space returned)."""
    from chatkeep.store.lifecycle import vacuum

    require_existing(db)
    engine = make_engine(db)
    try:
        for statement in vacuum(engine, full=full):
            console.print(statement)
    except (ChatkeepError, InvalidArgument) as exc:
        fail(f"{type(exc).__name__}: {exc}")
    finally:
        engine.dispose()


def _days(days: int | None) -> str:
    return "kept" if days is None else f"{days} days"


def _policy_json(policy: Any) -> dict[str, Any]:
    return {"tenant": str(policy.tenant), "session_idle_days": policy.session_idle_days,
            "memory_idle_days": policy.memory_idle_days}


@retention_app.command("set")
def set_policy(tenant: TenantRequired,
               session_idle_days: Annotated[int | None, typer.Option(
                   "--sessions-idle-days", min=0, max=36_500,
                   help="Delete sessions idle this many days.")] = None,
               memory_idle_days: Annotated[int | None, typer.Option(
                   "--memories-idle-days", min=0, max=36_500,
                   help="Delete memories neither recalled nor updated this many days.")] = None,
               as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """Set a tenant's retention policy (an option left out: kept forever)."""
    tenant_ref = ref_option(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        policy = keep.retention.set_policy(tenant_ref, session_idle_days=session_idle_days,
                                           memory_idle_days=memory_idle_days)
        if as_json:
            print_json(_policy_json(policy))
        else:
            console.print(f"retention for {safe(tenant_ref)}: sessions idle "
                          f"{_days(policy.session_idle_days)} · memories not recalled or updated "
                          f"{_days(policy.memory_idle_days)}")


@retention_app.command("show")
def show_policy(tenant: TenantRequired, as_json: JsonOption = False,
                db: DbOption = DEFAULT_DB) -> None:
    """The retention policy in force for a tenant (its own, or the config's default)."""
    tenant_ref = ref_option(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        policy = keep.retention.policy(tenant_ref)
        if as_json:
            print_json(_policy_json(policy))
        else:
            console.print(f"retention for {safe(tenant_ref)}: sessions idle "
                          f"{_days(policy.session_idle_days)} · memories not recalled or updated "
                          f"{_days(policy.memory_idle_days)}")


@retention_app.command("clear")
def clear_policy(tenant: TenantRequired, db: DbOption = DEFAULT_DB) -> None:
    """Remove a tenant's own policy (the config's default applies again)."""
    tenant_ref = ref_option(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        removed = keep.retention.clear_policy(tenant_ref)
        console.print(f"{'removed' if removed else 'there was no'} policy for "
                      f"{safe(tenant_ref)}")


@retention_app.command("sweep")
def sweep_retention(batch_size: Annotated[int, typer.Option(
                        min=1, max=100_000, help="Candidates per page.")] = 500,
                    as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """Delete what every tenant's policy says is past retention, skipping held scopes
    (safe to run from many places at once; a rerun does nothing)."""
    with open_keep(db, existing=True) as keep:
        report = keep.retention.sweep(
            batch_size=batch_size,
            progress=None if as_json else lambda r: console.print(
                f"... {r.sessions} sessions, {r.memories} memories deleted", style="dim"))
        if as_json:
            print_json(report.to_dict())
        else:
            console.print(f"deleted {report.sessions} sessions ({report.messages} messages) "
                          f"and {report.memories} memories ({report.expired} expired); "
                          f"{report.held} held, "
                          f"{report.skipped} skipped")
