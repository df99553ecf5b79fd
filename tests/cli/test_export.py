"""``chatkeep export`` / ``import``: a lossless dump. Exported, restored into an empty
database (on either store, and across them), and exported again, it is the same bytes;
a bad dump or a database that already holds its sessions restores nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref, Usage
from chatkeep.cli import app
from chatkeep.store.dump import FORMAT

runner = CliRunner()
ORG = Ref("organization", 7)
OTHER = Ref("organization", "acme")
KEY = "x5Jx3mzVb8Xc2t2QeVqk4m2cG6bJ1pVhQ0v7YJ0sZkM="  # a Fernet key: the vault is encrypted
CONFIG = {"chat": {"max_history_tokens": 700, "recent_messages_min": 2,
                   "summary_max_tokens": 300},
          "privacy": {"anonymize_pii": True, "encryption_key": KEY},
          "memory": {"distil_on_compress": False}}


def seed(url: str) -> None:
    """Everything a dump must carry: keys, references, tool plumbing, a retraction, a
    fold, usage, a sealed vault, metadata, memories (one superseded), two tenants."""
    with Chatkeep(url, config=CONFIG, dispatcher="inline") as keep:
        s = keep.sessions.open("support-4711", tenant=ORG, actor=Ref("user", 3),
                               subject=Ref("ticket", "T-9"), title="Refund",
                               metadata={"channel": "web", "n": [1, 2.5, None]})
        s.add_user("Write to jane.doe@example.com about order 1138", name="jane")
        s.add_assistant(None, tool_calls=[{"id": "call_1", "function": {
            "name": "lookup", "arguments": '{"order": 1138}'}}], usage=Usage(30, 5),
            model="m")
        s.add_tool_result("call_1", {"status": "shipped"})
        s.add_user("oops, wrong chat")
        s.retract_last()
        for i in range(8):
            s.add_user(f"U{i} " + "question " * 30)
            s.add_assistant(f"A{i} " + "answer " * 30, usage=Usage(40, 8), model="m")
        keep.compressor.build_history(s, "Be brief.")  # folds (offline summarizer)
        assert s.refresh().summary_watermark > 0
        keep.sessions.create(OTHER, anonymize_pii=False).add_system("Always be kind.")
        first = keep.memory.add(ORG, "The customer prefers email.")
        keep.memory.update(ORG, first.id, "The customer prefers email in the morning.")
        keep.memory.add(OTHER, "Acme pays in EUR.")


def export(url: str, path: Path, *args: str) -> bytes:
    result = runner.invoke(app, ["export", "--db", url, "--out", str(path), *args])
    assert result.exit_code == 0, result.output
    return path.read_bytes()


def restore(url: str, path: Path) -> str:
    result = runner.invoke(app, ["import", str(path), "--db", url])
    assert result.exit_code == 0, result.output
    return result.output


def test_export_import_export_is_byte_identical_across_stores(tmp_path: Path,
                                                              db_url: str) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    seed(source)
    first = export(source, tmp_path / "one.jsonl")
    assert first.startswith(b'{"format":"' + FORMAT.encode())
    vaults = [json.loads(line)["row"]["pii_vault"] for line in first.splitlines()[1:-1]
              if json.loads(line)["table"] == "chat_sessions"]
    assert any(vaults) and not any("jane.doe" in (v or "") for v in vaults)  # encrypted
    assert b'"retracted_at":"' in first and b'"superseded_by":' in first

    assert "restored" in restore(db_url, tmp_path / "one.jsonl")  # sqlite or postgresql
    second = export(db_url, tmp_path / "two.jsonl")
    assert second == first

    back = f"sqlite:///{tmp_path / 'back.db'}"
    restore(back, tmp_path / "two.jsonl")
    assert export(back, tmp_path / "three.jsonl") == first

    with Chatkeep(back, config=CONFIG) as keep:  # what was restored works as before
        s = keep.sessions.by_key("support-4711", ORG)
        assert s.summary_watermark > 0 and s.structured_summary is not None
        assert s.total_tokens == keep.repository.usage_sum(s.id) == 35 + 8 * 48
        assert any(m.retracted_at for m in s.messages)
        s.add_user("a new question after the restore")
        assert s.message_count == s.messages[-1].seq


def test_a_tenants_export_holds_only_its_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    seed(url)
    mine = export(url, tmp_path / "mine.jsonl", "--tenant", str(ORG)).decode()
    assert '"tenant_id":"7"' in mine and '"tenant_id":"acme"' not in mine
    assert "Acme pays" not in mine and "Always be kind" not in mine


def test_a_dump_restores_all_or_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'src.db'}"
    seed(url)
    dump = tmp_path / "dump.jsonl"
    export(url, dump)
    again = runner.invoke(app, ["import", str(dump), "--db", url])
    assert again.exit_code == 1 and "already holds sessions" in again.output

    lines = dump.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:5], '{"table": "chat_messages", "row": 3}',
                                 *lines[5:]]) + "\n")
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    result = runner.invoke(app, ["import", str(broken), "--db", empty])
    assert result.exit_code == 1 and "line 6" in result.output
    with Chatkeep(empty) as keep:
        assert keep.sessions.list(ORG) == []

    other_schema = tmp_path / "old.jsonl"
    other_schema.write_text(lines[0].replace('"schema":"', '"schema":"0001_') + "\n")
    result = runner.invoke(app, ["import", str(other_schema), "--db", empty])
    assert result.exit_code == 1 and "schema" in result.output


def test_a_dump_takes_no_session_options(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    seed(url)
    dump = tmp_path / "d.jsonl"
    export(url, dump)
    result = runner.invoke(app, ["import", str(dump), "--tenant", "org:1", "--db",
                                 f"sqlite:///{tmp_path / 'p.db'}"])
    assert result.exit_code == 1 and "do not apply" in result.output


@pytest.mark.parametrize("columns", [80])
def test_export_to_standard_output(tmp_path: Path, columns: int) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    seed(url)
    result = runner.invoke(app, ["export", "--db", url], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0
    assert result.stdout.encode() == export(url, tmp_path / "f.jsonl")
