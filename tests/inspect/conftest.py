"""Fixtures for the inspector: a seeded store on each backend, and clients over it.

The store is written by ``inspect_seed.seed`` through the public API; the inspector then
opens it read-only, as ``chatkeep inspect`` does. Clients talk to the ASGI application
in process (Starlette's ``TestClient``, over httpx), with the ``Host`` header a browser
on 127.0.0.1 sends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from inspect_seed import Seeded, config, embedder, seed
from starlette.testclient import TestClient

from chatkeep.config import Config
from chatkeep.inspect.app import open_app
from chatkeep.refs import Ref

BASE = "http://127.0.0.1:8765"


@pytest.fixture
def seeded(db_url: str) -> tuple[str, Seeded]:
    """The seeded store's URL and what was written."""
    return db_url, seed(db_url)


ClientFactory = Callable[..., TestClient]


@pytest.fixture
def make_client(seeded: tuple[str, Seeded]) -> Iterator[ClientFactory]:
    """``make_client(tenant=None, reveal=False, host=..., token=None, base=BASE)``: a client
    of an inspector over the seeded store (each closed afterwards)."""
    opened: list[Any] = []

    def factory(*, tenant: Ref | None = None, reveal: bool = False,
                host: str = "127.0.0.1", token: str | None = None, base: str = BASE,
                settings: dict[str, Any] | None = None) -> TestClient:
        app, inspector = open_app(seeded[0], config=Config.load(settings or config()),
                                  tenant=tenant, reveal=reveal, host=host, token=token,
                                  embedder=embedder())
        opened.append(inspector)
        return TestClient(app, base_url=base, raise_server_exceptions=True,
                          follow_redirects=False)

    yield factory
    for inspector in opened:
        inspector.keep.close()


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    """An unconfined inspector without reveal."""
    return make_client()


def free_port() -> int:
    """A port nothing listens on now (the server binds it right after)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def store_env(settings: dict[str, Any]) -> dict[str, str]:
    """The environment that configures ``chatkeep`` with ``settings`` (CHATKEEP_SECTION__KEY)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATKEEP_")}
    for section, values in settings.items():
        for key, value in values.items():
            env[f"CHATKEEP_{section.upper()}__{key.upper()}"] = str(value)
    return env


@contextmanager
def served(url: str, *args: str, settings: dict[str, Any] | None = None,
           timeout: float = 30) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``chatkeep inspect --db url *args`` running on a free loopback port: its base URL
    and process (stopped, by its own pid, on exit)."""
    port = free_port()
    command = [str(Path(sys.executable).parent / "chatkeep"), "inspect", "--db", url,
               "--port", str(port), *args]
    process = subprocess.Popen(command, env=store_env(settings or config()), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                output = process.stdout.read() if process.stdout else ""
                raise AssertionError(f"chatkeep inspect exited {process.returncode}: {output}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"chatkeep inspect did not listen within {timeout}s") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
