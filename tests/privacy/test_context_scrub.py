"""A request body scrubbed with the question its new input answers: values that only the
question identifies (a bare number after "your social security number?") are found."""

from __future__ import annotations

from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.egress import SessionEgress
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault

QUESTION = "What is your social security number?"


def egress() -> SessionEgress:
    return SessionEgress(Redactor(PiiDetector()), PlaceholderVault(), 0,
                         store=lambda version, vault: True,
                         load=lambda: (PlaceholderVault(), 0))


def test_a_bare_value_is_redacted_with_its_question_and_not_without() -> None:
    body = {"input": [{"role": "user", "content": "536221234"}]}
    assert egress().scrub(body) == body
    scrubbed = egress().scrub(body, QUESTION)
    assert "536221234" not in repr(scrubbed)
    assert scrubbed["input"][0]["role"] == "user"


def test_a_context_only_adds_findings() -> None:
    """A question can make a recognizer doubt a value ("order number?" before a bare
    number); a body scrubbed with a context must still redact what it finds without."""
    body = {"input": [{"role": "user", "content": "call me on +34 612 345 678"},
                      {"role": "user", "content": "612345678"}]}
    plain = egress().scrub(body)
    for question in ("What is your order number?", "What is your social security number?"):
        scrubbed = egress().scrub(body, question)
        assert "612 345 678" not in repr(scrubbed) and "612345678" not in repr(scrubbed)
        assert "612 345 678" not in repr(plain)
