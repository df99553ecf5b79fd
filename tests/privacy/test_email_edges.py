"""A known e-mail address joined to a word by ``-`` or ``_`` is still the address (a file
name, a tag): it left raw (found by the Pydantic AI property test); a longer address that
starts with it is another address, with its own placeholder."""

from __future__ import annotations

import pytest

from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault

ADDRESS = "ana.garcia@example.com"


@pytest.mark.parametrize(("text", "redacted"), [
    (f"x {ADDRESS}-Margarethe", "x <EMAIL_1>-Margarethe"),
    (f"file {ADDRESS}_notes.txt", "file <EMAIL_1>_notes.txt"),
    ("ana.garcia [at] example [dot] com-notes", "<EMAIL_1>-notes"),
    (f"{ADDRESS}.", "<EMAIL_1>."),
    (f"{ADDRESS}-mail.org", "<EMAIL_2>"),  # a longer domain: another address
    ("ana.garcia@example.company", "<EMAIL_2>"),
])
def test_a_known_address_ends_where_no_domain_goes_on(text: str, redacted: str) -> None:
    redactor, vault = Redactor(PiiDetector()), PlaceholderVault()
    assert redactor.redact(f"mail {ADDRESS}", vault) == "mail <EMAIL_1>"
    assert redactor.redact(text, vault) == redacted
