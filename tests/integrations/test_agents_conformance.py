"""``ChatkeepSession`` measured by the OpenAI Agents SDK's own session tests.

The SDK's sdist on PyPI holds its test tree. For each SDK version checked, the test
downloads that sdist (``pip download --no-binary :all:``), extracts the session tests
below with the conftest and helpers they import, and runs them in a pytest subprocess
with ``agents_sdk_shim`` loaded: every ``SQLiteSession``, ``SQLAlchemySession`` and
in-memory test session they construct is a ``ChatkeepSession`` over a fresh
``AsyncChatkeep`` on SQLite, named by the test's ``session_id``. Every selected test must
pass; only the tests in ``DESELECTED`` (another store's internals) are left out.

Versions: the installed SDK (the one chatkeep runs with), the newest the registry serves
(installed for the run with ``pip install --target``, skipped when it is the installed
one), and the newest 0.22 release. Downloads are kept in ``~/.cache/chatkeep-conformance``
(``CHATKEEP_CONFORMANCE_CACHE``), so the installed version needs the registry once. Without
the registry the test skips with the reason (fails under ``CHATKEEP_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SDK_TESTS = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/extensions/memory/test_sqlalchemy_session.py",
    "tests/test_hitl_session_scenario.py",
)

# (file, test function, why it is not run against chatkeep): each inspects or replaces the
# internals of the store it was written for (its tables, connections, locks, engine).
_SQLITE = "tests/memory/test_session.py"
_SQLA = "tests/extensions/memory/test_sqlalchemy_session.py"
DESELECTED: list[tuple[str, str, str]] = [
    (_SQLITE, "test_await_mutation_cancellation_hides_later_failure_without_loop_error",
     "tests sqlite_session's private _await_mutation helper, no session"),
    (_SQLITE, "test_sqlite_session_close_closes_worker_thread_connections",
     "inspects SQLiteSession._connections"),
    (_SQLITE, "test_sqlite_session_reaps_connections_from_exited_worker_threads",
     "inspects SQLiteSession._connections"),
    (_SQLITE, "test_sqlite_session_closes_retired_connections_before_the_next_allocation",
     "inspects SQLiteSession._connections and patches sqlite3.connect"),
    (_SQLITE, "test_sqlite_session_keeps_connections_of_live_worker_threads",
     "inspects SQLiteSession._connections"),
    (_SQLITE, "test_sqlite_session_closed_rejects_empty_add_items",
     "expects SQLiteSession's 'SQLiteSession is closed' error after close()"),
    (_SQLITE, "test_sqlite_session_pop_item_skips_corrupt_most_recent",
     "writes a corrupt row into SQLiteSession's agent_messages table"),
    (_SQLITE, "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows",
     "writes a corrupt row into SQLiteSession's agent_messages table"),
    (_SQLITE, "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows",
     "writes a corrupt row into SQLiteSession's agent_messages table"),
    (_SQLITE, "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows",
     "writes a corrupt row into SQLiteSession's agent_messages table"),
    (_SQLITE, "test_sqlite_session_file_lock_is_shared_across_instances",
     "inspects SQLiteSession._lock and _file_lock_counts"),
    (_SQLITE, "test_sqlite_session_failed_add_items_releases_write_lock",
     "writes into SQLiteSession's agent_sessions table"),
    (_SQLITE, "test_sqlite_session_failed_clear_session_rolls_back",
     "drops SQLiteSession's tables and inspects its connections"),
    (_SQLITE, "test_sqlite_session_failed_pop_item_releases_write_lock",
     "drops SQLiteSession's tables and inspects its connections"),
    (_SQLITE, "test_sqlite_session_rollback_failure_evicts_connection",
     "injects a connection into SQLiteSession._connections"),
    (_SQLITE, "test_sqlite_session_close_retries_quarantined_connection",
     "injects a connection into SQLiteSession._connections"),
    (_SQLITE, "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome",
     "injects a connection into SQLiteSession._connections"),
    (_SQLA, "test_sqlalchemy_session_defaults_to_escaped_non_ascii_storage",
     "reads SQLAlchemySession's agent_messages table"),
    (_SQLA, "test_sqlalchemy_session_can_store_non_ascii_without_escaping",
     "reads SQLAlchemySession's agent_messages table"),
    (_SQLA, "test_sqlite_fallback_reserves_writer_before_tail_claim",
     "patches the engine's dialect and checks SQLAlchemySession's SQL statements"),
    (_SQLA, "test_pop_item_supports_unknown_delete_rowcount",
     "replaces SQLAlchemySession._session_factory"),
    (_SQLA, "test_pop_item_retries_returning_claim_lost_to_concurrent_delete",
     "replaces SQLAlchemySession._session_factory"),
    (_SQLA, "test_mutation_cancellation_waits_for_transaction_exit",
     "replaces SQLAlchemySession._session_factory"),
    (_SQLA, "test_pop_item_skips_corrupt_most_recent",
     "writes a corrupt row into SQLAlchemySession's agent_messages table"),
    (_SQLA, "test_get_items_limit_skips_corrupt_newest_rows",
     "writes a corrupt row into SQLAlchemySession's agent_messages table"),
    (_SQLA, "test_pop_item_returns_none_after_dropping_only_corrupt_rows",
     "writes a corrupt row into SQLAlchemySession's agent_messages table"),
    (_SQLA, "test_add_items_cancelled_waiter_does_not_strand_table_init_lock",
     "holds SQLAlchemySession._init_lock"),
    (_SQLA, "test_create_tables_false_does_not_allocate_shared_init_lock",
     "inspects SQLAlchemySession._table_init_locks"),
    (_SQLA, "test_get_items_same_timestamp_consistent_order",
     "rewrites created_at in SQLAlchemySession's tables and its _session_factory"),
    (_SQLA, "test_pop_item_same_timestamp_returns_latest",
     "rewrites created_at in SQLAlchemySession's agent_messages table"),
    (_SQLA, "test_backdated_append_remains_the_latest_item",
     "rewrites created_at in SQLAlchemySession's agent_messages table (through its "
     "private _messages); test_openai_agents.py checks the same of chatkeep's table"),
    (_SQLA, "test_get_items_orders_by_id_for_ties",
     "checks the ORDER BY of SQLAlchemySession's queries"),
    (_SQLA, "test_engine_property_from_external_engine",
     "expects the session to run on the caller's AsyncEngine object"),
    (_SQLA, "test_sqlite_configuration_registry_releases_collected_engines",
     "inspects SQLAlchemySession._sqlite_configured_engines"),
    (_SQLA, "test_sqlite_configuration_registry_does_not_grow_unbounded",
     "inspects SQLAlchemySession._sqlite_configured_engines"),
    ("tests/test_hitl_session_scenario.py", "test_openai_conversations_session_hitl_scenario",
     "runs OpenAIConversationsSession over a fake Conversations API client"),
]

VERSIONS = ["installed", "newest", "0.22"]
#: Tests that pass, by version checked so far (every selected one); a version not listed
#: must pass every selected test, and at least ``MIN_PASSED`` of them.
EXPECTED_PASSED = {"0.22.3": 77, "0.24.0": 77, "0.25.0": 77}
MIN_PASSED = 60
PIP_TIMEOUT = 300
RUN_TIMEOUT = 900
HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("CHATKEEP_CONFORMANCE_CACHE",
                            "~/.cache/chatkeep-conformance")).expanduser()


class RegistryUnreachable(Exception):
    """pip could not get what the run needs from the registry."""


def unreachable(reason: str) -> None:
    """Skip with the reason (printed); under ``CHATKEEP_REQUIRE_SERVICES=1``, fail."""
    print(reason)
    if os.environ.get("CHATKEEP_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (CHATKEEP_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


def pip(*args: str) -> None:
    """``python -m pip ARGS`` with this interpreter; a failure is ``RegistryUnreachable``."""
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check",
               "--no-input", "-q"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise RegistryUnreachable(f"pip {args[0]} timed out after {PIP_TIMEOUT}s") from exc
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        tail = [line for line in lines if not line.startswith("WARNING")][-3:]
        raise RegistryUnreachable(f"pip {' '.join(args[:4])} failed: {' / '.join(tail)}")


def publish(build: Path, final: Path) -> Path:
    """Move a finished ``build`` into place (another run may have got there first)."""
    try:
        build.rename(final)
    except OSError:
        shutil.rmtree(build, ignore_errors=True)
        if not final.exists():
            raise
    return final


def resolve(which: str, installed: str) -> str:
    """The version ``which`` names: the installed one, or the registry's newest (of 0.22)."""
    if which == "installed":
        return installed
    requirement = "openai-agents" if which == "newest" else f"openai-agents~={which}.0"
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        pip("download", "--no-deps", "--only-binary", ":all:", "-d", scratch, requirement)
        (wheel,) = Path(scratch).glob("openai_agents-*.whl")
        version = wheel.name.split("-")[1]
        wheels = CACHE / "wheels"
        wheels.mkdir(exist_ok=True)
        if not (wheels / wheel.name).exists():
            os.replace(wheel, wheels / wheel.name)  # whole or not at all
    return version


def sdk_target(version: str) -> Path:
    """A ``pip install --target`` of the SDK ``version`` alone (its dependencies are the
    venv's: the same requirements in every version checked)."""
    final = CACHE / f"sdk-{version}"
    if final.exists():
        return final
    wheels = sorted((CACHE / "wheels").glob(f"openai_agents-{version}-*.whl"))
    return install(final, str(wheels[0]) if wheels else f"openai-agents=={version}")


def asyncio_plugin() -> Path:
    """pytest-asyncio, which the SDK's tests run under (not one of chatkeep's own needs)."""
    final = CACHE / "pytest-asyncio"
    if final.exists():
        return final
    return install(final, "pytest-asyncio>=1,<2")


def install(final: Path, requirement: str) -> Path:
    """``pip install --no-deps --target final requirement``, published whole or not at all."""
    CACHE.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(dir=CACHE, prefix=f".{final.name}-"))
    try:
        pip("install", "--no-deps", "--target", str(build), requirement)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return publish(build, final)


def sdk_tests(version: str) -> Path:
    """The SDK's test tree for ``version``: the session tests, every ``tests`` module they
    import (transitively), the conftest and package files on their way, its pytest
    configuration."""
    final = CACHE / f"tests-{version}"
    if final.exists():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    sdists = CACHE / "sdists"
    sdists.mkdir(exist_ok=True)
    sdist = sdists / f"openai_agents-{version}.tar.gz"
    if not sdist.exists():
        with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
            pip("download", "--no-deps", "--no-binary", ":all:", "-d", scratch,
                f"openai-agents=={version}")
            (downloaded,) = Path(scratch).glob("*.tar.gz")
            shutil.move(downloaded, sdist)
    build = Path(tempfile.mkdtemp(dir=CACHE, prefix=f".tests-{version}-"))
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1]: m for m in archive.getmembers()
                   if "/" in m.name and m.isfile()}
        for name in sorted(needed_files(members, archive)):
            data = archive.extractfile(members[name])
            assert data is not None
            target = build / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data.read())
    return publish(build, final)


def needed_files(members: dict[str, tarfile.TarInfo], archive: tarfile.TarFile) -> set[str]:
    """The session tests and what they need from the sdist, by their imports."""
    wanted = {"pyproject.toml"}
    queue = [name for name in SDK_TESTS if name in members]
    seen: set[str] = set()
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        wanted.add(name)
        parts = Path(name).parts
        for depth in range(1, len(parts)):  # package and conftest files on the way
            for extra in ("__init__.py", "conftest.py"):
                candidate = "/".join((*parts[:depth], extra))
                if candidate in members:
                    queue.append(candidate)
        data = archive.extractfile(members[name])
        assert data is not None
        for module in imported_test_modules(data.read().decode(), name):
            for candidate in (f"{module}.py", f"{module}/__init__.py"):
                if candidate in members:
                    queue.append(candidate)
    return wanted


def imported_test_modules(source: str, name: str) -> set[str]:
    """The ``tests`` modules ``source`` (the file ``name``) imports, as paths without
    ``.py``: ``from tests.utils.hitl import X``, ``from .testing_processor import Y``."""
    found: set[str] = set()
    package = list(Path(name).parts[:-1])
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = [*base, *(node.module.split(".") if node.module else [])]
            else:
                module = (node.module or "").split(".")
            if module[:1] == ["tests"]:
                found.add("/".join(module))
                found.update("/".join((*module, alias.name)) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name.replace(".", "/") for alias in node.names
                         if alias.name.split(".")[0] == "tests")
    return found


def run_sdk_tests(tree: Path, sdk: Path | None, plugin: Path,
                  scratch: Path) -> tuple[Counter[str], list[str], str]:
    """Run the SDK's session tests in ``tree`` against the shim: outcomes by kind, the
    failing tests, pytest's output."""
    report = scratch / "report.xml"
    paths = [str(p) for p in (sdk, plugin, HERE) if p is not None]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths),
           "CHATKEEP_SDK_DESELECT": json.dumps(DESELECTED)}
    for variable in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        env.pop(variable, None)  # pytest-asyncio loads from its entry point
    files = [f for f in SDK_TESTS if (tree / f).exists()]
    command = [sys.executable, "-m", "pytest", "-p", "agents_sdk_shim", "-p", "no:cacheprovider",
               "-q", "-rfE", f"--junitxml={report}", "-o", "faulthandler_timeout=120",
               f"--basetemp={scratch / 'sdk'}", *files]
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"the SDK's tests did not finish in {RUN_TIMEOUT}s (a test hangs; the "
                    f"tracebacks after 120s show where):\n{partial[-8000:]}")
    output = done.stdout + done.stderr
    assert report.exists(), output[-4000:]
    outcomes: Counter[str] = Counter()
    failing = []
    for case in ET.parse(report).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = kinds[0] if kinds else "passed"
        outcomes[outcome] += 1
        if outcome != "passed":
            failing.append(f"{case.get('classname')}::{case.get('name')} ({outcome})")
    return outcomes, failing, output


@pytest.mark.parametrize("which", VERSIONS)
def test_chatkeep_session_passes_the_sdks_own_session_tests(which: str) -> None:
    installed = importlib.metadata.version("openai-agents")
    try:
        version = resolve(which, installed)
        if which == "newest" and version == installed:
            pytest.skip(f"the newest SDK on the registry ({version}) is the installed one: "
                        "checked by [installed]")
        tree = sdk_tests(version)
        sdk = None if version == installed else sdk_target(version)
        plugin = asyncio_plugin()
    except RegistryUnreachable as exc:
        unreachable(f"the OpenAI Agents SDK's tests ({which}) are not reachable: {exc}")
        return
    missing = [f for f in SDK_TESTS if not (tree / f).exists()]
    assert not missing, f"openai-agents {version} has no {missing}"

    # (A scratch directory of its own: the run outlasts the cleanup of pytest's numbered
    # base directories by other pytest runs on the machine.)
    with tempfile.TemporaryDirectory(prefix="chatkeep-agents-sdk-run-") as scratch:
        outcomes, failing, output = run_sdk_tests(tree, sdk, plugin, Path(scratch))
    deselected = re.search(r"(\d+) deselected", output)
    print(f"openai-agents {version}: {outcomes['passed']} passed, "
          f"{len(failing)} not, {deselected.group(1) if deselected else 0} deselected")
    assert failing == [], "\n".join([*failing, output[-6000:]])
    # The shim ran the suite, not nothing.
    assert outcomes["passed"] == EXPECTED_PASSED.get(version, outcomes["passed"]), \
        output[-4000:]
    assert outcomes["passed"] >= MIN_PASSED, output[-4000:]
