"""The two privacy switches' rules (``chatkeep.switches``), as every part reads them."""

from __future__ import annotations

import itertools

from chatkeep import switches


def test_a_session_is_protected_when_created_under_both_switches() -> None:
    for app, own in itertools.product([False, True], repeat=2):
        assert switches.protected_at_creation(app, own) is (app and own)


def test_a_session_redacts_with_its_own_switch_and_the_apps_or_its_protection() -> None:
    table = {(own, app, protected): switches.redacts(own, app, protected)
             for own, app, protected in itertools.product([False, True], repeat=3)}
    assert [k for k, v in table.items() if v] == [(True, False, True), (True, True, False),
                                                  (True, True, True)]
