"""PiiDetector: overlap rule, span checks and the custom recognizer protocol."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chatkeep.errors import PrivacyError
from chatkeep.privacy.detector import (
    ContextualRecognizer,
    PiiDetector,
    Recognizer,
    Span,
    default_recognizers,
    resolve_overlaps,
)


class EmployeeIds:
    """A custom recognizer: ``EMP-`` followed by five digits."""

    entity_types: tuple[str, ...] = ("EMPLOYEE_ID",)

    def find(self, text: str) -> Iterator[Span]:
        start = text.find("EMP-")
        while start != -1:
            end = start + 9
            if text[start + 4 : end].isdigit() and len(text[start + 4 : end]) == 5:
                yield Span(start, end, "EMPLOYEE_ID", text[start:end])
            start = text.find("EMP-", start + 1)


class Fixed:
    """Reports preset spans, to exercise the overlap rule."""

    def __init__(self, *spans: Span) -> None:
        self.entity_types = tuple({s.entity_type for s in spans})
        self._spans = spans

    def find(self, text: str) -> Iterator[Span]:
        return iter(self._spans)


def test_default_detector_finds_everything_sorted() -> None:
    text = "Mail a@b.co, card 4111 1111 1111 1111, ip 10.0.0.1, DNI 12345678Z."
    spans = PiiDetector().detect(text)
    assert [s.entity_type for s in spans] == ["EMAIL", "CREDIT_CARD", "IP_ADDRESS", "ES_NIF"]
    assert [s.start for s in spans] == sorted(s.start for s in spans)


def test_longer_span_wins_url_over_email() -> None:
    text = "postgres://u:pw@db.example.com/app"
    spans = PiiDetector().detect(text)
    assert [(s.entity_type, s.text) for s in spans] == [("URL_CREDENTIALS", text)]


def test_overlap_rule_length_then_priority_then_score_then_start() -> None:
    text = "x" * 40
    longer = Span(0, 10, "PHONE", text[0:10])
    shorter = Span(5, 8, "CREDIT_CARD", text[5:8])
    assert resolve_overlaps([shorter, longer]) == [longer]
    same_a = Span(20, 30, "PHONE", text[20:30])
    same_b = Span(20, 30, "US_SSN", text[20:30])
    assert resolve_overlaps([same_a, same_b]) == [same_b]
    low = Span(0, 4, "PERSON", text[0:4], score=0.6)
    high = Span(1, 5, "PERSON", text[1:5], score=0.9)
    assert resolve_overlaps([low, high]) == [high]
    first = Span(0, 4, "PERSON", text[0:4])
    second = Span(2, 6, "PERSON", text[2:6])
    assert resolve_overlaps([second, first]) == [first]


def test_non_overlapping_spans_are_all_kept_and_touching_is_not_overlap() -> None:
    text = "abcdefghij"
    spans = [Span(5, 10, "X", text[5:10]), Span(0, 5, "X", text[0:5]), Span(2, 4, "Y", "cd")]
    assert resolve_overlaps(spans) == [spans[1], spans[0]]


def test_custom_recognizer_protocol() -> None:
    custom = EmployeeIds()
    assert isinstance(custom, Recognizer)
    detector = PiiDetector([*default_recognizers(), custom])
    spans = detector.detect("EMP-12345 wrote to a@b.co")
    assert [(s.entity_type, s.text) for s in spans] == [
        ("EMPLOYEE_ID", "EMP-12345"),
        ("EMAIL", "a@b.co"),
    ]
    assert "EMPLOYEE_ID" in detector.entity_types


def test_custom_recognizers_replace_the_defaults() -> None:
    assert PiiDetector([EmployeeIds()]).detect("a@b.co EMP-00001")[0].text == "EMP-00001"
    assert len(PiiDetector([EmployeeIds()]).detect("a@b.co")) == 0


def test_object_without_the_protocol_is_rejected() -> None:
    with pytest.raises(PrivacyError, match="not a recognizer"):
        PiiDetector([object()])  # type: ignore[list-item]


def test_invalid_entity_type_is_rejected() -> None:
    bad = Fixed(Span(0, 1, "lower-case", "x"))
    with pytest.raises(PrivacyError, match="invalid entity type"):
        PiiDetector([bad])


@pytest.mark.parametrize(
    "span",
    [Span(0, 3, "X", "abd"), Span(2, 1, "X", ""), Span(0, 99, "X", "abc"), Span(-1, 2, "X", "ab")],
)
def test_span_that_does_not_fit_the_text_is_an_error(span: Span) -> None:
    with pytest.raises(PrivacyError, match="does not fit"):
        PiiDetector([Fixed(span)]).detect("abcdef")


def test_undeclared_entity_type_is_an_error() -> None:
    liar = Fixed(Span(0, 1, "B", "a"))
    liar.entity_types = ("A",)
    with pytest.raises(PrivacyError, match="does not declare"):
        PiiDetector([liar]).detect("abc")


def test_phone_regions_reach_the_default_set() -> None:
    assert PiiDetector(phone_regions=("ES",)).detect("612345678")[0].canonical == "+34612345678"
    assert PiiDetector(phone_regions=("US",)).detect("612345678") == []


class TicketAnswers:
    """A contextual recognizer: a bare number answering "Which ticket?" is a ticket id."""

    entity_types: tuple[str, ...] = ("TICKET_ID",)

    def find(self, text: str) -> Iterator[Span]:
        return iter(())

    def find_in_context(self, text: str, context: str) -> Iterator[Span]:
        if "ticket" in context.lower() and text.strip().isdigit():
            start = text.index(text.strip())
            yield Span(start, start + len(text.strip()), "TICKET_ID", text.strip())


def test_context_reaches_contextual_recognizers_only() -> None:
    assert isinstance(TicketAnswers(), ContextualRecognizer)
    assert not isinstance(EmployeeIds(), ContextualRecognizer)
    detector = PiiDetector([TicketAnswers(), EmployeeIds()])
    assert detector.detect("4471923") == []
    spans = detector.detect("4471923", context="Which ticket is it?")
    assert [(s.entity_type, s.text) for s in spans] == [("TICKET_ID", "4471923")]
    # A recognizer without find_in_context is called as before.
    assert [s.text for s in detector.detect("EMP-12345", context="Which ticket?")] == ["EMP-12345"]


def test_context_is_optional_and_positional_calls_still_work() -> None:
    detector = PiiDetector()
    text = "mail a@b.co"
    assert detector.detect(text) == detector.detect(text, None) == detector.detect(text, "")


def test_default_detector_reads_the_previous_message() -> None:
    detector = PiiDetector()
    assert detector.detect("536221234") == []
    spans = detector.detect("536221234", context="What's your SSN?")
    assert [(s.entity_type, s.canonical) for s in spans] == [("US_SSN", "536221234")]


def test_overlap_resolution_stays_linear_with_many_spans() -> None:
    # 20 000 spans, half of them overlapping kept ones: must not degrade to O(n^2).
    text = "x" * 100_000
    spans = [Span(i, i + 4, "X", text[i : i + 4]) for i in range(0, 100_000, 5)]
    spans += [Span(i + 2, i + 5, "Y", text[i + 2 : i + 5]) for i in range(0, 100_000, 5)]
    kept = resolve_overlaps(spans)
    assert len(kept) == 20_000 and all(s.entity_type == "X" for s in kept)
    assert [s.start for s in kept] == sorted(s.start for s in kept)
