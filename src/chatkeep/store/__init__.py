"""Persistence: tables, engine set-up and the repository (the only code that issues SQL)."""

from chatkeep.store.engine import make_engine
from chatkeep.store.repository import Repository, SessionRow, UsageLine

__all__ = ["Repository", "SessionRow", "UsageLine", "make_engine"]
