"""Persistence: tables, engine set-up, migrations, and the repositories and driver paths
that run every SQL statement (no module outside this package issues SQL)."""

from chatkeep.store.engine import make_engine
from chatkeep.store.repository import Repository, SessionRow, UsageLine

__all__ = ["Repository", "SessionRow", "UsageLine", "make_engine"]
