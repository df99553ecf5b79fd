"""Built-in pattern recognizers: a regular expression finds candidates, a rule validates them."""

from __future__ import annotations

from chatkeep.privacy.recognizers.emails import EmailRecognizer
from chatkeep.privacy.recognizers.financial import CreditCardRecognizer, IbanRecognizer
from chatkeep.privacy.recognizers.names import PersonRecognizer
from chatkeep.privacy.recognizers.national_ids import (
    EsNifRecognizer,
    UkNinoRecognizer,
    UsSsnRecognizer,
)
from chatkeep.privacy.recognizers.network import IpAddressRecognizer, UrlCredentialsRecognizer
from chatkeep.privacy.recognizers.phones import DEFAULT_PHONE_REGIONS, PhoneRecognizer

__all__ = [
    "DEFAULT_PHONE_REGIONS",
    "CreditCardRecognizer",
    "EmailRecognizer",
    "EsNifRecognizer",
    "IbanRecognizer",
    "IpAddressRecognizer",
    "PersonRecognizer",
    "PhoneRecognizer",
    "UkNinoRecognizer",
    "UrlCredentialsRecognizer",
    "UsSsnRecognizer",
]
