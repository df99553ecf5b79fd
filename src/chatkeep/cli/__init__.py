"""The ``chatkeep`` command: demo, sessions, history, import, usage (and more, mounted).

``main`` answers ``chatkeep --version`` before loading any command (a fraction of the
time the whole CLI takes to import); everything else goes to :mod:`chatkeep.cli.app`.
"""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatkeep.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """The console script."""
    if sys.argv[1:] == ["--version"]:
        from chatkeep import __version__

        print(f"chatkeep {__version__}")
        return
    # The imports allocate a few hundred thousand objects that live as long as the
    # process; the cyclic collector would scan them again and again while they load
    # (about a tenth of a read command's start-up). Collect nothing while importing,
    # then freeze what the imports made out of the collector's way, and collect as usual
    # for the command itself.
    gc.disable()
    try:
        from chatkeep.cli.app import main as run
    finally:
        gc.freeze()
        gc.enable()
    run()


def __getattr__(name: str) -> Any:
    if name == "app":
        from chatkeep.cli.app import app

        # Importing the submodule bound the name ``app`` to it: the Typer app takes it back.
        globals()["app"] = app
        return app
    raise AttributeError(f"module 'chatkeep.cli' has no attribute {name!r}")
