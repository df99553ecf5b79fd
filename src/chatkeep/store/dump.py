"""A lossless copy of what chatkeep stores, as JSON Lines: ``chatkeep export`` / ``import``.

Every row of the sessions, messages, tool calls, usage ledger, folds, memories and the
lifecycle's records (legal holds, retention policies, erasures with the ids they removed,
the lifecycle log), column by column: seqs, times, metadata, retractions, the summary and
its watermark, the fold and distillation state, and each session's placeholder vault
still sealed (the key never leaves with it). Derived data is left out and rebuilt:
memory vectors (``chatkeep memories embed``) and the recall cache's stamps. The lines
themselves, their checks and the trailer are :mod:`chatkeep.store.dump_format`; what an
import may create is :mod:`chatkeep.store.dump_checks`.

An export is one consistent cut: one read-only REPEATABLE READ transaction on PostgreSQL,
one read transaction (a WAL snapshot) on SQLite, streamed (a server-side cursor on
PostgreSQL), so writers carry on and memory stays flat. A file is written beside its
target and renamed over it only when complete.

An import reads the dump twice: first every line is checked (the trailer's counts and
digest, each value, ownership) and the target database is asked whether it already
holds any of the dump's sessions or tenants; only then are the rows written, in batches,
in one transaction, which commits only if the second reading agrees with the first.
Surrogate ids are the importing database's own, so a tenant moves into a database that
holds others. Restored into an empty database, on either store, a dump exports again
byte for byte.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Connection, Engine, Table, exists, func, literal, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from chatkeep.errors import DumpWriteError, InvalidDump, StoreError
from chatkeep.refs import Ref
from chatkeep.store.connections import reading, store_error, transaction
from chatkeep.store.dump_checks import Claims, Ownership
from chatkeep.store.dump_format import (
    BY_NAME,
    FORMAT,
    NUMBER_REFS,
    NUMBERED,
    TABLES,
    Digest,
    decoded,
    encoded,
    header,
    line,
    parse_header,
)
from chatkeep.store.schema import chat_sessions, ref_filter

__all__ = ["FORMAT", "TABLES", "CheckedDump", "check_file", "dump_lines", "restore_file",
           "restore_lines", "write_dump", "write_lines"]

BATCH = 1000
"""Rows fetched per round trip on export, and inserted per ``executemany`` on import."""
_CHUNK = 500  # ids per membership query
Progress = Callable[[str, int], None]
"""Told the stage ("checking", "importing") and the rows done so far, every batch."""


# -- export -----------------------------------------------------------------------------

def dump_lines(engine: Engine, schema: str, tenant: Ref | None = None, *,
               batch: int = BATCH) -> Generator[bytes, None, None]:
    """The dump of ``engine``'s database (only ``tenant``'s rows when given), line by
    line as UTF-8 bytes, header first and trailer last: all of it read in one snapshot,
    ``batch`` rows per round trip."""
    digest = Digest()
    first = line(header(schema, tenant))
    digest.add(first)
    yield first
    with _snapshot(engine, batch) as conn:
        for table in TABLES:
            try:
                for row in conn.execute(_query(table, tenant)):
                    raw = line({"table": table.name, "row": _exported(table, row._mapping)})
                    digest.add(raw, table.name)
                    yield raw
            except SQLAlchemyError as exc:
                raise store_error(exc) from exc
    yield line(digest.trailer())


@contextlib.contextmanager
def _snapshot(engine: Engine, batch: int) -> Iterator[Connection]:
    """One read-only transaction that sees one instant of the database."""
    with reading(engine, block=True) as conn:
        if engine.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ",
                                   postgresql_readonly=True)
        conn.execution_options(stream_results=True, yield_per=batch)
        yield conn


def _query(table: Table, tenant: Ref | None) -> Any:
    """``table``'s rows (``tenant``'s only when given) in primary-key order; a numbered
    table's with their number ``n``, and each column naming a numbered row with that
    row's number ``<column>_n``."""
    refs = [(column, BY_NAME[target]) for (name, column), target in NUMBER_REFS.items()
            if name == table.name]
    if table.name not in NUMBERED and not refs:
        query = select(table).order_by(*table.primary_key.columns)
        return query if tenant is None else query.where(_of_tenant(table, tenant))
    base: Any = _numbered(table, tenant) if table.name in NUMBERED else table
    picked: list[Any] = [base]
    joined = base
    for column, target in refs:
        other = _numbered(target, tenant).alias(f"{column}_target")
        picked.append(other.c.n.label(f"{column}_n"))
        joined = joined.outerjoin(other, other.c.id == base.c[column])
    query = select(*picked).select_from(joined).order_by(base.c.id)
    if base is table and tenant is not None:
        query = query.where(_of_tenant(table, tenant))
    return query


def _numbered(table: Table, tenant: Ref | None) -> Any:
    """``table``'s rows with their number in the dump (1, 2, ... in id order)."""
    inner = select(table, func.row_number().over(order_by=table.c.id).label("n"))
    if tenant is not None:
        inner = inner.where(_of_tenant(table, tenant))
    return inner.subquery(f"{table.name}_numbered")


def _exported(table: Table, row: Any) -> dict[str, Any]:
    out = encoded(table, row)
    if table.name in NUMBERED:
        out["id"] = row["n"]
    for (name, column), target in NUMBER_REFS.items():
        if name == table.name and row[column] is not None:
            # The row it names may be gone (an erased successor): a memory superseded by
            # itself stays retired; a log line's hold is then unknown.
            own = row["n"] if target == name else None
            out[column] = row[f"{column}_n"] or own
    return out


def _of_tenant(table: Table, tenant: Ref) -> Any:
    if "tenant_type" in table.columns:
        return ref_filter(table, "tenant", tenant)
    return table.c.session_id.in_(
        select(chat_sessions.c.id).where(ref_filter(chat_sessions, "tenant", tenant)))


def write_dump(lines: Iterable[bytes], path: str | Path,
               progress: Callable[[int], None] | None = None) -> int:
    """Write ``lines`` to ``path`` through a temporary file beside it, renamed over it once
    complete and on disk: ``path`` is the whole dump or untouched. Returns the lines
    written. A full disk (any ``OSError``) is a ``DumpWriteError``."""
    target = Path(path)
    try:
        file, temporary = _open_beside(target)
    except OSError as exc:
        raise _write_error(target, exc) from None
    try:
        with file:
            written = write_lines(lines, file, progress)
            _synced(file, target)
        try:
            os.replace(temporary, target)
        except OSError as exc:
            raise _write_error(target, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return written


def _open_beside(target: Path) -> tuple[IO[bytes], str]:
    """A new temporary file in ``target``'s folder (so the rename stays on one disk)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial",
                                         dir=target.parent)
    return os.fdopen(handle, "wb"), temporary


def write_lines(lines: Iterable[bytes], file: IO[bytes],
                progress: Callable[[int], None] | None = None) -> int:
    """Write ``lines`` to an open binary ``file`` (standard output, a pipe); an ``OSError``
    on the way (a full disk, a closed pipe) is a ``DumpWriteError``. Returns the count."""
    written = 0
    try:
        for raw in lines:
            file.write(raw)
            written += 1
            if progress is not None and written % BATCH == 0:
                progress(written)
        file.flush()
    except BrokenPipeError:
        raise  # the reader went away (`| head`): not a failure to report
    except OSError as exc:
        raise _write_error(Path(str(getattr(file, "name", "<output>"))), exc) from None
    return written


def _synced(file: IO[bytes], target: Path) -> None:
    try:
        file.flush()
        os.fsync(file.fileno())
    except OSError as exc:
        raise _write_error(target, exc) from None


def _write_error(target: Path, exc: OSError) -> DumpWriteError:
    reason = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return DumpWriteError(f"cannot write the dump to {target}: {reason}; nothing was "
                          "written there")


# -- import -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Checked:
    """The first reading of a dump: what it needs the database not to hold, its digest."""

    claims: Claims
    digest: str


@dataclass(frozen=True, slots=True)
class CheckedDump:
    """A dump file read and checked in full (:func:`check_file`): what it needs the
    database not to hold, and its digest (the second reading must match it)."""

    path: Path
    claims: Claims
    digest: str


def _read(path: Path) -> Iterator[bytes]:
    try:
        with path.open("rb") as file:
            yield from file
    except OSError as exc:
        raise InvalidDump(f"cannot read {path}: {exc.strerror or exc}") from None


def check_file(path: str | Path, schema: str,
               progress: Progress | None = None) -> CheckedDump:
    """Read the dump at ``path`` and check every line (trailer, values, ownership),
    without a database: ``InvalidDump`` names the first problem."""
    checked = _check(_read(Path(path)), schema, progress)
    return CheckedDump(Path(path), checked.claims, checked.digest)


def restore_file(engine: Engine, path: str | Path | CheckedDump, schema: str,
                 progress: Progress | None = None) -> dict[str, int]:
    """Restore the dump at ``path`` (or one :func:`check_file` has checked): every line
    is checked first and the database asked whether it holds any of the dump's
    sessions or tenants (nothing is written when any is refused), then the rows are
    inserted in one transaction. Returns the rows restored per table."""
    checked = path if isinstance(path, CheckedDump) else check_file(path, schema, progress)
    _refuse_held(engine, checked.claims)
    return _write(engine, _read(checked.path), schema, progress,
                  _Checked(checked.claims, checked.digest))


def restore_lines(engine: Engine, lines: Iterable[str | bytes], schema: str,
                  progress: Progress | None = None) -> dict[str, int]:
    """Restore a dump read once (a stream that cannot be read twice): checked as it is
    inserted, in one transaction that commits only when the trailer proves the dump
    whole. Prefer :func:`restore_file`, which writes nothing before all is checked."""
    raw = (item.encode("utf-8") if isinstance(item, str) else item for item in lines)
    return _write(engine, raw, schema, progress, None)


def _rows(lines: Iterable[bytes], schema: str,
          digest: Digest) -> Iterator[tuple[Table, dict[str, Any]] | Ownership]:
    """Each row of the dump, decoded and checked; first the ``Ownership`` for its tenant
    (so the caller can admit rows); the trailer is checked last."""
    iterator = iter(lines)
    first = next(iterator, b"")
    tenant = parse_header(first, schema)
    digest.add(first)
    yield Ownership(tenant)
    number = 1
    for number, raw in enumerate(iterator, start=2):
        problem = f"line {number}: not a row of a chatkeep dump"
        try:
            item = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise InvalidDump(f"{problem} ({type(exc).__name__}: {exc})"[:300]) from None
        if isinstance(item, dict) and set(item) == {"trailer"}:
            if not raw.endswith(b"\n"):
                raise InvalidDump(f"line {number}: the trailer is cut short")
            digest.check(item["trailer"], number)
            if next(iterator, None) is not None:
                raise InvalidDump(f"line {number + 1}: lines after the dump's trailer")
            return
        if not isinstance(item, dict) or set(item) != {"table", "row"} or \
                item["table"] not in BY_NAME:
            raise InvalidDump(problem)
        table = BY_NAME[item["table"]]
        try:
            row = decoded(table, item["row"])
        except InvalidDump as exc:
            raise InvalidDump(f"line {number}: {exc}") from None
        digest.add(raw, table.name)
        yield table, row
    raise InvalidDump(f"line {number}: the dump ends without its trailer: it was cut "
                      "short, so nothing was restored")


class _Admitted:
    """The dump's rows, each admitted by the ownership of the dump's tenant before it is
    handed on (both passes of an import walk it), with ``progress`` as ``stage`` every
    ``BATCH`` rows. ``ownership`` is the dump's once the walk has begun."""

    def __init__(self, lines: Iterable[bytes], schema: str, digest: Digest,
                 progress: Progress | None, stage: str) -> None:
        self._lines, self._schema, self._digest = lines, schema, digest
        self._progress, self._stage = progress, stage
        self.ownership: Ownership | None = None

    def __iter__(self) -> Iterator[tuple[Ownership, Table, dict[str, Any]]]:
        done = 0
        for item in _rows(self._lines, self._schema, self._digest):
            if isinstance(item, Ownership):
                self.ownership = item
                continue
            table, row = item
            assert self.ownership is not None
            _admit(self.ownership, table, row, done)
            done += 1
            if self._progress is not None and done % BATCH == 0:
                self._progress(self._stage, done)
            yield self.ownership, table, row

    def finished(self) -> Ownership:
        """The dump's ownership after the walk (its header makes one, rows or none)."""
        assert self.ownership is not None
        return self.ownership


def _check(lines: Iterable[bytes], schema: str, progress: Progress | None) -> _Checked:
    digest = Digest()
    rows = _Admitted(lines, schema, digest, progress, "checking")
    for _ in rows:
        pass
    return _Checked(rows.finished().finish(), digest.hexdigest())


def _admit(ownership: Ownership, table: Table, row: dict[str, Any], done: int) -> None:
    try:
        ownership.admit(table.name, row)
    except InvalidDump as exc:
        raise InvalidDump(f"line {done + 2}: {exc}") from None


def _write(engine: Engine, lines: Iterable[bytes], schema: str, progress: Progress | None,
           checked: _Checked | None) -> dict[str, int]:
    digest = Digest()
    counts = {table.name: 0 for table in TABLES}
    try:
        with transaction(engine) as conn:
            if checked is not None:
                _refuse_held_in(conn, checked.claims)
            writer = _Writer(conn)
            rows = _Admitted(lines, schema, digest, progress, "importing")
            for owner, table, row in rows:
                writer.add(table, row, owner)
                counts[table.name] += 1
            ownership = rows.finished()
            ownership.finish()
            writer.flush(ownership)
            writer.link()
            if checked is not None and digest.hexdigest() != checked.digest:
                raise InvalidDump("the dump changed while it was being imported; nothing "
                                  "was restored")
    except IntegrityError as exc:
        raise StoreError(f"the dump conflicts with rows already in the database, so "
                         f"nothing was restored: {exc.orig}") from exc
    return counts


class _Writer:
    """Rows buffered per table and inserted ``BATCH`` at a time (``executemany``); the
    claims of what was buffered are checked against the database before each insert. A
    numbered row gets its database id (``RETURNING``, in order), and a column naming one
    gets that id; a memory's successor comes later, so it is linked at the end."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._table: Table | None = None
        self._rows: list[dict[str, Any]] = []
        self._ids: dict[str, dict[int, int]] = {name: {} for name in NUMBERED}
        self._later: list[tuple[Table, str, int, int]] = []  # table, column, row, target

    def add(self, table: Table, row: dict[str, Any], ownership: Ownership) -> None:
        """Buffer ``row`` (checked and admitted), flushing the batch before it if full."""
        if table is not self._table or len(self._rows) >= BATCH:
            self.flush(ownership)
            self._table = table
        for (name, column), target in NUMBER_REFS.items():
            if name != table.name or row[column] is None:
                continue
            if target == name:
                self._later.append((table, column, row["id"], row[column]))
                row[column] = 0  # retired from the start (no row has id 0); linked below
            else:
                row[column] = self._ids[target][row[column]]
        self._rows.append(row)

    def flush(self, ownership: Ownership) -> None:
        """Insert the buffered rows, after asking the database about what the rows
        admitted so far claim (each session, tenant and source once)."""
        _refuse_held_in(self._conn, ownership.fresh())
        if not self._rows:
            return
        table, rows = self._table, self._rows
        self._rows = []
        assert table is not None
        if table.name in NUMBERED:
            numbers = [row.pop("id") for row in rows]
            ids = self._conn.execute(
                table.insert().returning(table.c.id, sort_by_parameter_order=True),
                rows).scalars().all()
            self._ids[table.name].update(zip(numbers, ids, strict=True))
        else:
            self._conn.execute(table.insert(), rows)

    def link(self) -> None:
        """Point each column naming a later row at that row's database id."""
        for table, column, number, target in self._later:
            ids = self._ids[table.name]
            self._conn.execute(update(table).where(table.c.id == ids[number])
                               .values({column: ids[target]}))


def _refuse_held(engine: Engine, claims: Claims) -> None:
    with reading(engine) as conn:
        _refuse_held_in(conn, claims)


def _refuse_held_in(conn: Connection, claims: Claims) -> None:
    """Refuse a restore into a database that holds any of the dump's sessions, any row of
    its tenants, or a session its memories name but it does not carry."""
    for ids, what in ((claims.sessions, "sessions of this dump"),
                      (claims.sources, "a session this dump's memories or holds name "
                                       "but it does not carry")):
        ordered = sorted(ids)
        for start in range(0, len(ordered), _CHUNK):
            held = conn.execute(select(chat_sessions.c.id).where(
                chat_sessions.c.id.in_(ordered[start:start + _CHUNK])).limit(1)).first()
            if held is not None:
                raise InvalidDump(f"the database already holds {what} ({held[0]}): an "
                                  "import only creates; restore into a database without "
                                  "them")
    for tenant in sorted(claims.tenants, key=lambda ref: (ref.type, ref.id_text)):
        held = conn.execute(select(literal(1)).where(or_(*(
            exists().where(ref_filter(table, "tenant", tenant))
            for table in TABLES if "tenant_type" in table.columns)))).first()
        if held is not None:
            raise InvalidDump(f"the database already holds rows of tenant {tenant}: an "
                              "import creates a tenant's sessions and memories, never "
                              "adds to them (move the tenant into a database without it)")
