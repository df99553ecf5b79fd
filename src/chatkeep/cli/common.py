"""What every command shares: options, opening ``Chatkeep``, error display, JSON output.

The rule for failures: one red line on stderr saying what went wrong and where, exit
code 1 (2 for a usage error Click reports: a bad option value, a missing argument), and
never a traceback (``-v`` logs one for an unexpected error).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.exc import SQLAlchemyError
from typer.core import TyperGroup

from chatkeep.app import Chatkeep
from chatkeep.config import Config
from chatkeep.errors import ChatkeepError, StoreError
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.store import migrate
from chatkeep.store.connections import store_error
from chatkeep.store.engine import describe_url, parse_url, sqlite_path

console = Console()
err_console = Console(stderr=True)
log = logging.getLogger("chatkeep.cli")

DEFAULT_DB = "sqlite:///chatkeep.db"

DbOption = Annotated[str, typer.Option(
    "--db", envvar="CHATKEEP_DATABASE_URL", show_envvar=True,
    help="Database URL (sqlite:///file.db or postgresql+psycopg://user@host/db).")]
ConfigOption = Annotated[str | None, typer.Option(
    "--config", envvar="CHATKEEP_CONFIG", show_envvar=True,
    help="TOML config file: tables chat, llm, memory, privacy, store.")]
JsonOption = Annotated[bool, typer.Option(
    "--json", help="Print JSON (for scripts) instead of a table.")]
TenantOption = Annotated[str | None, typer.Option(
    "--tenant", help="Scope to this tenant, as TYPE:ID.")]


def safe(value: object) -> str:
    """Stored or user text for rich output: brackets shown as typed, never read as markup."""
    return escape(str(value))


def fail(message: str, code: int = 1) -> NoReturn:
    """One red line on stderr, then exit with ``code``."""
    err_console.print(f"[red]error:[/red] {safe(message)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def parse_ref(value: str | None, what: str) -> Ref | None:
    """``TYPE:ID`` from the command line, as a ``Ref``; the id is an ``int`` only when
    typed as a canonical decimal (``7``, not ``007``), so the tenant is exactly the one
    typed. A malformed one is a usage error naming ``--what``."""
    if value is None:
        return None
    try:
        return Ref.parse(value)
    except ChatkeepError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'--{what}'") from None


def ref_option(value: str, what: str) -> Ref:
    """``parse_ref`` for a required option (a usage error, not ``chatkeep.refs.require_ref``'s
    ``InvalidReference``)."""
    ref = parse_ref(value, what)
    assert ref is not None
    return ref


def parse_time(value: str | None, option: str = "--since") -> datetime | None:
    """``2026``, ``2026-11``, ``2026-11-01`` or an ISO date-time (naive values are UTC);
    anything else is a usage error naming ``option``."""
    if value is None:
        return None
    text = value.strip()
    try:
        if len(text) == 4 and text.isascii() and text.isdigit():
            parsed = datetime(int(text), 1, 1)
        elif len(text) == 7 and text[4] == "-" and text.replace("-", "").isascii() \
                and text.replace("-", "").isdigit():
            parsed = datetime(int(text[:4]), int(text[5:]), 1)
        else:
            parsed = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a date: use 2026, 2026-11, 2026-11-01 or 2026-11-01T09:30",
            param_hint=f"'{option}'") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_range(since: str | None, until: str | None) -> tuple[datetime | None,
                                                                datetime | None]:
    """``--since``/``--until`` parsed; an empty or inverted range is a usage error."""
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    if start is not None and end is not None and start >= end:
        raise typer.BadParameter(f"{since} is not before --until {until}: the range is empty",
                                 param_hint="'--since'")
    return start, end


def print_json(data: Any) -> None:
    """JSON on stdout, for scripts (``jq``): indented, UTF-8."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def ref_json(ref: Ref | None) -> dict[str, Any] | None:
    """A reference as JSON, its id with the type it was stored with."""
    return None if ref is None else {"type": ref.type, "id": ref.id}


def session_json(s: ChatSession) -> dict[str, Any]:
    """A session's row as JSON (what ``sessions list --json`` prints per session)."""
    row = s.row
    return {
        "id": s.id, "key": s.key, "tenant": ref_json(s.tenant), "actor": ref_json(s.actor),
        "subject": ref_json(s.subject), "title": s.title, "message_count": s.message_count,
        "billed_tokens": s.total_tokens, "summary_watermark": s.summary_watermark,
        "summary_version": row.summary_version, "distilled_through": row.distilled_through,
        "anonymize_pii": s.anonymize_pii, "closed": s.closed,
        "created_at": row.created_at.isoformat(),
        "last_message_at": row.last_message_at.isoformat(), "metadata": s.metadata,
    }


def require_existing(db: str, *, schema: bool = True) -> None:
    """For commands that only read (or erase): a SQLite file that is not there (or, with
    ``schema``, cannot be read or has no chatkeep schema) is an error naming it, never a
    new database."""
    try:
        path = sqlite_path(parse_url(db))
    except StoreError as exc:
        fail(str(exc))
    if path is None:
        return
    if not path.exists():
        fail(f"no database at {path} ({describe_url(db)}): check --db or "
             "CHATKEEP_DATABASE_URL; `chatkeep db upgrade` creates one")
    if schema:
        problem = sqlite_file_problem(path) or _schema_problem(path)
        if problem:
            fail(problem)


SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file (an empty file is an empty database)."""


def sqlite_file_problem(path: Path) -> str | None:
    """What is wrong with the SQLite file at ``path`` that chatkeep cannot work around, in
    words (``None``: nothing seen): a folder, not a database, unreadable, or where it
    cannot write (SQLite writes its journal beside the file, even for a read in WAL mode,
    which chatkeep sets). Read without opening it as a database."""
    if not path.exists():
        folder = path.parent
        if not folder.is_dir():
            return None
        if _read_only_fs(folder):
            return f"cannot create {path}: {folder} is on a read-only file system"
        if not os.access(folder, os.W_OK):
            return f"cannot create {path}: {folder} is read-only for this user"
        return None
    if path.is_dir():
        return f"{path} is a folder, not a database file: check --db"
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_MAGIC))
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}"
    if header and header != SQLITE_MAGIC:
        return f"{path} is not a SQLite database (check --db)"
    if _read_only_fs(path.parent):
        return (f"{path} is on a read-only file system: SQLite must write beside it (its "
                "-wal and -shm files) even to read; copy it to a writable folder")
    if not os.access(path.parent, os.W_OK) or not os.access(path, os.W_OK):
        return (f"{path} is read-only for this user (the file or its folder): SQLite must "
                "write beside it (its -wal and -shm files) even to read")
    return None


def _read_only_fs(folder: Path) -> bool:
    """Whether ``folder`` is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):  # no statvfs (Windows), or not a folder
        return False


def _schema_problem(path: Path) -> str | None:
    """Why the SQLite file is not a chatkeep database (``None``: it is stamped by chatkeep's
    migrations): corrupt, truncated, or without the schema. Read without opening it for
    writing (an empty file stays empty)."""
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            stamped = conn.execute("SELECT 1 FROM alembic_version").fetchone() is not None
    except sqlite3.Error as exc:
        kind = getattr(exc, "sqlite_errorname", "")
        if kind == "SQLITE_NOTADB":
            return f"{path} is not a SQLite database (check --db)"
        if kind == "SQLITE_CORRUPT":
            return (f"{path} is damaged (SQLite: {exc}): a truncated or corrupt file; "
                    "restore it from a backup")
        if "no such table" not in str(exc):
            return f"{path} cannot be read: {exc}"
        stamped = False
    return None if stamped else (
        f"{path} has no chatkeep schema: run `chatkeep db upgrade --db ...` first")


def explain_store_error(db: str, message: str) -> str:
    """``message`` about database ``db``, or, when ``db`` is a SQLite file with a problem
    :func:`sqlite_file_problem` can name (read-only, not a database), that instead: the
    driver's "unable to open database file" does not say why."""
    try:
        path = sqlite_path(parse_url(db))
    except StoreError:
        return message
    return (sqlite_file_problem(path) if path is not None else None) or message


@contextmanager
def open_keep(db: str, config_file: str | None = None,
              settings: Mapping[str, Any] | None = None, *, existing: bool = False,
              **kwargs: Any) -> Iterator[Chatkeep]:
    """Open ``Chatkeep`` with config from file/env plus ``settings``. ``existing``: the
    database must already exist with chatkeep's schema (read commands never create or
    migrate one). A ``ChatkeepError`` becomes a red line and exit code 1."""
    keep = None
    try:
        if existing:
            require_existing(db)
            kwargs.setdefault("create_schema", False)
        config = Config.load(settings, toml_path=config_file)
        kwargs.setdefault("dispatcher", "inline")  # a command finishes its own work
        keep = Chatkeep(db, config=config, **kwargs)
        if existing and _revision(keep) is None:
            fail(f"{describe_url(db)} has no chatkeep schema: run `chatkeep db upgrade "
                 "--db ...` first")
        yield keep
    except StoreError as exc:
        fail(explain_store_error(db, f"{type(exc).__name__}: {exc}"))
    except ChatkeepError as exc:
        fail(f"{type(exc).__name__}: {exc}")
    finally:
        if keep is not None:
            keep.close()


def _revision(keep: Chatkeep) -> str | None:
    """The database's revision; one this chatkeep does not ship is a ``StoreError`` (a read
    must not run against a schema it does not know)."""
    try:
        return migrate.check_current(keep.engine)
    except SQLAlchemyError as exc:
        raise store_error(exc) from exc


VERBOSE_FLAGS = ("-v", "--verbose")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (a test runner swaps
    it per command)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    @property
    def stream(self) -> Any:
        """The current ``sys.stderr``."""
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def log_to_stderr() -> Callable[[], None]:
    """``-v``: chatkeep's INFO logs on stderr; returns the function that undoes it."""
    logger = logging.getLogger("chatkeep")
    handler, level = _StderrHandler(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    def undo() -> None:
        logger.removeHandler(handler)
        logger.setLevel(level)

    return undo


def hoist_verbose(args: list[str]) -> list[str]:
    """``-v`` anywhere before ``--`` counts: ``chatkeep sessions list -v`` is
    ``chatkeep -v sessions list`` (the root's own options are flags, so the first
    non-option word is the command)."""
    args = list(args)
    command = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if command is None:
        return args
    end = args.index("--") if "--" in args[command:] else len(args)
    moved = [a for a in args[command + 1:end] if a in VERBOSE_FLAGS]
    if not moved:
        return args
    rest = [a for a in args[command + 1:end] if a not in VERBOSE_FLAGS]
    return ["-v", *args[:command + 1], *rest, *args[end:]]


def reflow(text: str | None) -> str | None:
    """Help text as paragraphs: a docstring's line breaks inside a paragraph become spaces,
    so the terminal wraps it (they broke ``--help`` mid-sentence at every width)."""
    if not text:
        return text
    paragraphs = [" ".join(line.strip() for line in part.splitlines() if line.strip())
                  for part in text.split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def reflow_help(command: Any) -> None:
    """Reflow ``command``'s help and its options' and subcommands' (recursively). A flag
    shows no metavar: ``--json`` takes no value, so ``<bool>`` beside it misleads."""
    command.help = reflow(command.help)
    for param in getattr(command, "params", ()):
        if getattr(param, "help", None):
            param.help = reflow(param.help)
        _no_flag_metavar(param)
    if callable(getattr(command, "get_help_option", None)):
        command.get_help_option = _help_option_of(command.get_help_option)
    for sub in getattr(command, "commands", {}).values():
        reflow_help(sub)


def _no_flag_metavar(param: Any) -> Any:
    if param is not None and getattr(param, "is_flag", False) and param.metavar is None:
        param.metavar = ""
    return param


def _help_option_of(made: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``--help`` (built by Click per context) without a metavar, as every flag."""
    return lambda ctx: _no_flag_metavar(made(ctx))


class ChatkeepGroup(TyperGroup):
    """The root command: ``-v`` after the subcommand too, and every failure one line.

    A ``ChatkeepError`` is reported with its type; anything unexpected says so in one
    line (its traceback is logged with ``-v``). Usage errors stay Click's (exit 2).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        reflow_help(self)

    def get_params(self, ctx: Any) -> list[Any]:
        """The root's options, flags without a metavar (Typer adds its completion flags
        after the group is built)."""
        return [_no_flag_metavar(param) for param in super().get_params(ctx)]

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse the root's options after moving a trailing ``-v`` in front."""
        return super().parse_args(ctx, hoist_verbose(args))

    def invoke(self, ctx: Any) -> Any:
        """Run the command; turn whatever escapes it into one red line and exit 1."""
        try:
            return super().invoke(ctx)
        except ChatkeepError as exc:
            fail(f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            if hasattr(exc, "exit_code") or isinstance(exc, typer.Exit | typer.Abort
                                                       | BrokenPipeError):
                raise  # Click's own usage errors and exits, and `| head` closing the pipe
            if any(isinstance(h, _StderrHandler) for h in logging.getLogger("chatkeep").handlers):
                log.error("unexpected error", exc_info=True)
            fail(f"unexpected {type(exc).__name__}: {exc} (run with -v for the traceback; "
                 "please report it)")
