from datetime import timedelta

import pytest

from chatkeep import Config, ConfigError, InvalidReference, Ref


def test_ref_validates_type_and_id() -> None:
    with pytest.raises(InvalidReference):
        Ref("", 1)
    with pytest.raises(InvalidReference):
        Ref("organization", "  ")
    with pytest.raises(InvalidReference):
        Ref("organization", True)  # a bool is not an id
    with pytest.raises(InvalidReference):
        Ref("organization", 1.5)  # type: ignore[arg-type]
    assert Ref("organization", 7).id_is_int
    assert not Ref("organization", "7").id_is_int


def test_ref_parse_and_round_trip_columns() -> None:
    assert Ref.parse("user:42").id == 42 and Ref.parse("user:u-42").id == "u-42"
    with pytest.raises(InvalidReference):
        Ref.parse("no-colon")
    for ref in (Ref("org", 99), Ref("org", "99")):
        again = Ref.from_columns(ref.type, ref.id_text, ref.id_is_int)
        assert again == ref and again is not None and type(again.id) is type(ref.id)
    assert Ref.from_columns(None, None, None) is None


def test_refs_compare_canonically_as_they_are_stored() -> None:
    """``Ref("org", 1)`` and ``Ref("org", "1")`` are one tenant in the database (ids are
    stored as text), so they are one in Python too: equal, same hash, one set element."""
    assert Ref("org", 1) == Ref("org", "1") and hash(Ref("org", 1)) == hash(Ref("org", "1"))
    assert len({Ref("org", 1), Ref("org", "1")}) == 1
    assert {Ref("org", 1): "a"}[Ref("org", "1")] == "a"
    assert Ref("org", 1) != Ref("org", "01") and Ref("org", 1) != Ref("team", 1)
    assert Ref("org", 1) != Ref("org", 2) and Ref("org", 1) != "org:1"
    assert Ref("org", 1).id_text == Ref("org", "1").id_text == "1"


class _Tenant:
    def __init__(self, type_: object, id_: object) -> None:
        self.type, self.id = type_, id_


@pytest.mark.parametrize("value", [
    Ref("organization", 7), "organization:7", {"type": "organization", "id": 7},
    {"type": "organization", "id": "7", "name": "Acme"}, _Tenant("organization", 7),
    _Tenant("organization", "7"),
])
def test_ref_coerce_accepts_every_way_a_run_context_names_a_tenant(value: object) -> None:
    ref = Ref.coerce(value)
    assert isinstance(ref, Ref) and ref == Ref("organization", 7)
    assert str(ref) == "organization:7"


def test_ref_coerce_keeps_a_ref_and_the_id_type() -> None:
    ref = Ref("organization", "7")
    assert Ref.coerce(ref) is ref
    assert Ref.coerce({"type": "matter", "id": "M-1"}).id == "M-1"
    assert Ref.coerce("organization:007") != Ref("organization", 7)  # text names what it says


@pytest.mark.parametrize("value", [
    None, 7, True, 1.5, b"organization:7", "organization", "organization:", ":7", "",
    {"type": "organization"}, {"id": 7}, {"type": "", "id": 7}, {"type": "org", "id": None},
    {"type": "org", "id": True}, {"type": 1, "id": 7}, ["organization", 7],
    ("organization", 7), _Tenant("organization", None), _Tenant(None, 7), object(),
])
def test_ref_coerce_refuses_what_names_no_tenant(value: object) -> None:
    with pytest.raises(InvalidReference):
        Ref.coerce(value)


def test_config_defaults_and_dict() -> None:
    config = Config.from_dict({"chat": {"max_history_tokens": 8000, "language": "Spanish"}})
    assert config.chat.max_history_tokens == 8000
    assert config.chat.recent_messages_min == 4
    assert config.chat.language == "Spanish"
    assert config.privacy.anonymize_pii is False
    assert config.memory.distil_on_compress is True


@pytest.mark.parametrize("data", [
    {"chat": {"max_history_token": 10}},  # typo
    {"chats": {}},
    {"chat": {"max_history_tokens": "many"}},
    {"chat": {"max_history_tokens": -1}},
    {"chat": {"compress_target": 1.5}},
    {"chat": {"max_history_tokens": 500, "summary_max_tokens": 600}},
    {"memory": {"distil_on_compress": "perhaps"}},
    {"privacy": {"phone_regions": ["usa"]}},
])
def test_config_rejects_bad_input(data: dict) -> None:
    with pytest.raises(ConfigError):
        Config.from_dict(data)


def test_config_from_env_and_toml(tmp_path) -> None:
    env = {"CHATKEEP_CHAT__MAX_HISTORY_TOKENS": "9000",
           "CHATKEEP_MEMORY__SWEEP_IDLE_AFTER": "2h",
           "CHATKEEP_PRIVACY__ANONYMIZE_PII": "true",
           "CHATKEEP_PRIVACY__PHONE_REGIONS": "ES, GB"}
    config = Config.from_env(env)
    assert config.chat.max_history_tokens == 9000
    assert config.memory.sweep_idle_after == timedelta(hours=2)
    assert config.privacy.anonymize_pii is True
    assert config.privacy.phone_regions == ("ES", "GB")

    path = tmp_path / "chatkeep.toml"
    path.write_text('[chat]\nrecent_messages_min = 6\n[memory]\nsweep_idle_after = 90\n')
    loaded = Config.load(toml_path=path, environ={"CHATKEEP_CHAT__LANGUAGE": "German"},
                         data={"chat": {"max_history_tokens": 7000}})
    assert loaded.chat.recent_messages_min == 6
    assert loaded.chat.language == "German"
    assert loaded.chat.max_history_tokens == 7000
    assert loaded.memory.sweep_idle_after == timedelta(seconds=90)

    path.write_text("[chat\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Config.from_toml(path)


@pytest.mark.parametrize(("typed", "expected"), [
    ("organization:7", Ref("organization", 7)),
    ("organization:0", Ref("organization", 0)),
    ("organization:007", Ref("organization", "007")),  # not tenant 7
    ("organization:+7", Ref("organization", "+7")),
    ("organization:-7", Ref("organization", "-7")),
    ("organization:١٢", Ref("organization", "١٢")),  # Arabic-Indic digits stay text
    ("organization:²", Ref("organization", "²")),  # a superscript used to crash int()
    ("organization:７", Ref("organization", "７")),  # fullwidth
    ("organization: 7", Ref("organization", " 7")),
    ("matter:M-1:2", Ref("matter", "M-1:2")),
])
def test_ref_parse_makes_an_int_only_of_a_canonical_decimal(typed: str, expected: Ref) -> None:
    ref = Ref.parse(typed)
    assert ref == expected and type(ref.id) is type(expected.id)
    assert str(ref) == typed  # the tenant is exactly the one typed


@pytest.mark.parametrize("typed", ["organization:", ":7", "organization: ", "7", "",
                                   "organization:a\x00", "organization:" + "9" * 256])
def test_ref_parse_refuses_what_names_nothing(typed: str) -> None:
    with pytest.raises(InvalidReference):
        Ref.parse(typed)


def test_store_section_and_durations() -> None:
    assert Config().store.sqlite_synchronous == "FULL"
    assert Config.from_dict({"store": {"sqlite_synchronous": "normal"}}
                            ).store.sqlite_synchronous == "NORMAL"
    with pytest.raises(ConfigError, match=r"store\.sqlite_synchronous"):
        Config.from_dict({"store": {"sqlite_synchronous": "fast"}})
    with pytest.raises(ConfigError, match=r"unknown config key store\.synchronous"):
        Config.from_dict({"store": {"synchronous": "FULL"}})
    for text, seconds in (("90", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400),
                          ("1.5h", 5400)):
        assert Config.from_dict({"memory": {"sweep_idle_after": text}}
                                ).memory.sweep_idle_after == timedelta(seconds=seconds)
    for bad in ("999999999999d", "-5m", "1e9", "soon", "١٢m", "nan"):
        with pytest.raises(ConfigError, match=r"memory\.sweep_idle_after"):
            Config.from_dict({"memory": {"sweep_idle_after": bad}})
    for bad_int in ("²", "١٢", str(2**64), "1_000"):
        with pytest.raises(ConfigError, match=r"chat\.max_history_tokens"):
            Config.from_dict({"chat": {"max_history_tokens": bad_int}})
