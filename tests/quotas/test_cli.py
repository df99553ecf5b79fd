"""``chatkeep quotas set|get|list|clear|sweep``, each with ``--json``; bad arguments are
a red line and exit code 1, with nothing written."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref
from chatkeep.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_quotas_from_the_cli(db_url: str) -> None:
    Chatkeep(db_url).start().close()  # the schema
    db = ("--db", db_url)
    code, out = run("quotas", "set", "--tenant", "org:1", "--tokens", "5000", "--window",
                    "month", "--json", *db)
    assert code == 0, out
    quota = json.loads(out)
    assert (quota["tokens"], quota["window"], quota["remaining"]) == (5000, "month", 5000)
    assert quota["tenant"] == {"type": "org", "id": 1}
    code, out = run("quotas", "set", "--tenant", "org:1", "--actor", "user:7", "--tokens",
                    "100", "--window", "24h", *db)
    assert code == 0 and "100 tokens per 86400s" in out, out

    keep = Chatkeep(db_url)
    keep.quotas.reserve(Ref("org", 1), 60, actor=Ref("user", 7))
    keep.close()
    code, out = run("quotas", "get", "--tenant", "org:1", "--actor", "user:7", "--json", *db)
    assert code == 0 and json.loads(out)["reserved"] == 60 and json.loads(out)["remaining"] == 40
    code, out = run("quotas", "list", "--json", *db)
    assert code == 0 and [q["tokens"] for q in json.loads(out)] == [5000, 100]
    code, out = run("quotas", "sweep", "--json", *db)
    assert code == 0 and json.loads(out) == {"ended": 0}  # the lease has not ended
    code, out = run("quotas", "clear", "--tenant", "org:1", "--actor", "user:7", "--json", *db)
    assert code == 0 and json.loads(out) == {"removed": True}
    code, out = run("quotas", "get", "--tenant", "org:2", *db)
    assert code == 0 and "no quota for org:2" in out


def test_bad_arguments_are_refused(db_url: str) -> None:
    Chatkeep(db_url).start().close()
    db = ("--db", db_url)
    code, out = run("quotas", "set", "--tenant", "org:1", "--tokens", "10", "--window",
                    "fortnight", *db)
    assert code == 1 and "InvalidArgument" in out and "window" in out
    code, out = run("quotas", "set", "--tenant", "org:1", "--tokens", "-5", *db)
    assert code != 0
    code, out = run("quotas", "list", "--json", *db)
    assert code == 0 and json.loads(out) == []
