"""The ``chatkeep`` command: demo, sessions, history, import, usage (and more, mounted)."""

from chatkeep.cli.app import app, main

__all__ = ["app", "main"]
