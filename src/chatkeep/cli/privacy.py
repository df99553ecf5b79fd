"""``chatkeep privacy rekey``: seal every stored PII mapping with the newest key (the only
reader of plain mappings once a key is configured)."""

from __future__ import annotations

import typer

from chatkeep.cli.common import DEFAULT_DB, ConfigOption, DbOption, console, open_keep

privacy_app = typer.Typer(help="Operate on stored personal-data mappings.",
                          no_args_is_help=True)


@privacy_app.command("rekey")
def rekey_command(db: DbOption = DEFAULT_DB, config: ConfigOption = None) -> None:
    """Re-seal session vaults and memories' values with the newest privacy.encryption_key
    (keys comma-separated, newest first): after turning encryption on, or rotating.
    With a key set, mappings stored plain are refused everywhere else (a plain one has
    no integrity check): this migration is the one place that reads and seals them."""
    # Loaded here, not with the CLI: the read commands do not import the privacy layer.
    from rich.progress import Progress

    from chatkeep.privacy.rekey import RekeyReport, rekey, total

    with open_keep(db, config) as keep:
        key = keep.config.privacy.encryption_key
        count = total(keep.repository, keep.memory.store)
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("re-sealing", total=count)

            def step(report: RekeyReport) -> None:
                progress.update(task, completed=report.done)

            report = rekey(keep.repository, keep.memory.store, key, step)
        console.print(
            f"vaults: {report.vaults_resealed} re-sealed, {report.vaults_current} already "
            f"current; memories: {report.memories_resealed} re-sealed, "
            f"{report.memories_current} already current; {report.raced} changed meanwhile "
            "(written with the newest key by the application)")
