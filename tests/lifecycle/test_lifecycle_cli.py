"""The lifecycle from the command line: sessions delete, erase (--dry-run, --receipt,
--verify), holds place|release|list (shown by sessions show), db vacuum; every one with
--json."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

from lifecycle_helpers import ANN, T1, label, on_disk, plant
from typer.testing import CliRunner

from chatkeep.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_delete_erase_verify_and_holds_from_the_cli(db_url: str, tmp_path: Path) -> None:
    world = plant(db_url)
    db = ("--db", db_url)
    target = world.sessions[label(T1, ANN, None)]

    code, out = run("holds", "place", "--tenant", "org:1", "--actor", "user:ann",
                    "--reason", "audit 7", "--json", *db)
    assert code == 0, out
    hold = json.loads(out)
    assert hold["kind"] == "actor" and hold["reason"] == "audit 7"
    code, out = run("sessions", "show", target, "--tenant", "org:1", "--json", *db)
    assert code == 0 and json.loads(out)["holds"][0]["reason"] == "audit 7"
    code, out = run("sessions", "show", target, "--tenant", "org:1", *db)
    assert "audit 7" in out
    code, out = run("sessions", "delete", target, "--tenant", "org:1", *db)
    assert code == 1 and "audit 7" in out and "ScopeOnHold" in out
    code, out = run("erase", "--tenant", "org:1", "--actor", "user:ann", "--dry-run", *db)
    assert code == 0 and "REFUSED" in out and "sessions: 2" in out
    code, out = run("holds", "list", "--tenant", "org:1", "--json", *db)
    assert [h["id"] for h in json.loads(out)] == [hold["id"]]
    code, out = run("holds", "release", str(hold["id"]), "--tenant", "org:1", *db)
    assert code == 0, out

    code, out = run("sessions", "delete", target, "--tenant", "org:1", "--json", *db)
    assert code == 0, out
    assert json.loads(out)["deleted"]["messages"] == 5
    code, out = run("sessions", "delete", target, "--tenant", "org:1", *db)
    assert code == 1 and "SessionNotFound" in out

    receipt = tmp_path / "receipt.json"
    code, out = run("erase", "--tenant", "org:1", "--actor", "user:ann", "--receipt",
                    str(receipt), "--by", "dpo", *db)
    assert code == 0, out
    data = json.loads(receipt.read_text())
    assert data["counts"]["sessions"] == 1 and "zq" not in receipt.read_text()
    assert on_disk(db_url, world.of(T1, ANN)) == []
    code, out = run("erase", "--verify", str(receipt), *db)
    assert code == 0 and "verified" in out
    data["counts"]["messages"] += 1
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(data))
    code, out = run("erase", "--verify", str(tampered), "--json", *db)
    assert code == 1 and json.loads(out)["verified"] is False
    code, out = run("erase", "--tenant", "org:1", "--actor", "user:ann", "--json", *db)
    assert code == 0 and sum(v for k, v in json.loads(out)["counts"].items()
                             if not k.endswith("unlinked")) == 0

    code, out = run("db", "vacuum", *db)
    assert code == 0 and "VACUUM" in out, out


def test_retention_from_the_cli(db_url: str) -> None:
    db = ("--db", db_url)
    from chatkeep import Chatkeep, Ref

    Chatkeep(db_url).start().close()
    code, out = run("retention", "set", "--tenant", "org:3", "--sessions-idle-days", "30",
                    "--json", *db)
    assert code == 0 and json.loads(out)["session_idle_days"] == 30, out
    code, out = run("retention", "show", "--tenant", "org:3", *db)
    assert "30 days" in out and "kept" in out
    code, out = run("retention", "sweep", "--json", *db)
    assert code == 0 and json.loads(out)["sessions"] == 0, out
    with Chatkeep(db_url) as keep:  # a memory past its expiry goes whatever the policy
        fact = keep.memory.add(Ref("org", 4), "expires at once")
        keep.memory.set_expiry(Ref("org", 4), fact.id, timedelta(seconds=1))
    time.sleep(1.1)
    code, out = run("retention", "sweep", "--json", *db)
    assert code == 0 and json.loads(out)["expired"] == json.loads(out)["memories"] == 1, out
    code, out = run("retention", "sweep", *db)
    assert code == 0 and "0 memories (0 expired)" in out, out
    code, out = run("retention", "clear", "--tenant", "org:3", *db)
    assert code == 0 and "removed" in out
    assert Ref("org", 3)
