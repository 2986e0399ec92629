"""broker/config.py: layering of default.yaml, broker files and RAFTQ_* variables; validation."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import typing

import pytest

from raftq.config import (
    DEFAULT_CONFIG_PATH,
    DEV_CLUSTER_SECRET,
    BrokerConfig,
    BrokerSettings,
    ConfigError,
    RaftSettings,
    load_config,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECRET = "s3cret-of-sixteen-or-more"


def load(env: dict[str, str] | None = None, path: str | None = None) -> BrokerConfig:
    """load_config with a hermetic environment: only the variables a test names."""
    return load_config(path, env=env or {})


# --- defaults and files --------------------------------------------------------------------


def test_default_yaml_equals_the_dataclass_defaults() -> None:
    config = load()
    assert config == BrokerConfig(broker=BrokerSettings(cluster_secret=DEV_CLUSTER_SECRET))
    assert config.raft.fsync is True
    assert config.storage.synchronous == "NORMAL"
    assert config.topic_defaults.lease_ms == 30_000
    assert config.topic_defaults.max_deliveries == 5
    assert config.broker.uses_dev_secret


def test_default_yaml_names_and_comments_every_setting() -> None:
    """Every field appears in default.yaml under a comment (a pair may share one comment)."""
    lines = DEFAULT_CONFIG_PATH.read_text().splitlines()
    found: dict[str, set[str]] = {}
    section = ""
    for number, line in enumerate(lines):
        if re.match(r"^[a-z_]+:\s*$", line):
            section = line.rstrip(":").strip()
            found[section] = set()
            continue
        match = re.match(r"^  ([a-z_]+):", line)
        if not match:
            continue
        found[section].add(match.group(1))
        above = number - 1
        while re.match(r"^  [a-z_]+:", lines[above]):  # a pair under one comment
            above -= 1
        assert lines[above].lstrip().startswith("#"), f"{section}.{match.group(1)} has no comment"
    sections = typing.get_type_hints(BrokerConfig)
    expected = {name: {f.name for f in dataclasses.fields(cls)} for name, cls in sections.items()}
    assert found == expected


def test_readme_has_a_row_for_every_setting() -> None:
    """The README's settings tables (Configuration; Security for TLS and tokens) have a row for
    every setting, and none for a setting that does not exist."""
    readme = (ROOT / "README.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)`(?:, `[a-z_.]+`)* \|", readme, flags=re.M))
    rows |= set(re.findall(r"^\| `[a-z_.]+`, `([a-z_]+\.[a-z_]+)` \|", readme, flags=re.M))
    sections = typing.get_type_hints(BrokerConfig)
    settings = {f"{s}.{f.name}" for s, cls in sections.items() for f in dataclasses.fields(cls)}
    assert sorted(settings - rows) == [], "settings missing from README's configuration table"
    ours = {row for row in rows if row.split(".")[0] in sections}  # not Kafka's names
    assert sorted(ours - settings) == [], "README rows naming no setting"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_dev_cluster_broker_files(n: int) -> None:
    config = load(path=f"configs/broker{n}.yaml")
    broker = config.broker
    assert broker.id == n
    assert broker.client_addr == f"127.0.0.1:{7069 + n}"
    assert broker.raft_addr == f"127.0.0.1:{9069 + n}"
    assert broker.metrics_addr == f"127.0.0.1:{9099 + n}"
    assert broker.data_dir == f"./data/broker-{n}"
    # The broker file's list replaces default.yaml's instead of being appended to it.
    assert broker.seeds == ("127.0.0.1:9070", "127.0.0.1:9071", "127.0.0.1:9072")
    # Everything the broker file does not name comes from default.yaml.
    assert dataclasses.replace(config, broker=load().broker) == load()


def test_override_file_changes_only_what_it_names(tmp_path: pathlib.Path) -> None:
    override = tmp_path / "mine.yaml"
    override.write_text("raft:\n  fsync: false\nBroker:\n  Rack: r2\n")
    config = load(path=str(override))
    assert config.raft.fsync is False
    assert config.raft.heartbeat_ms == load().raft.heartbeat_ms
    assert config.broker.rack == "r2"


def test_missing_or_malformed_file_is_a_config_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml.*does not exist"):
        load(path=str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("raft: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml is not valid YAML"):
        load(path=str(bad))
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("rafts:\n  fsync: false\nraft: 3\n")
    with pytest.raises(ConfigError) as caught:
        load(path=str(wrong))
    assert caught.value.settings == ("rafts", "raft")
    assert "did you mean raft?" in str(caught.value)
    assert "raft in " in str(caught.value) and "must be a mapping" in str(caught.value)


# --- environment ---------------------------------------------------------------------------


def test_env_overrides_nested_settings() -> None:
    config = load(
        {
            "RAFTQ_RAFT__FSYNC": "false",
            "RAFTQ_BROKER__ID": "2",
            "RAFTQ_BROKER__SEEDS": "10.0.0.1:9070, 10.0.0.2:9070",
            "RAFTQ_BROKER__CLUSTER_SECRET": SECRET,
            "RAFTQ_STORAGE__SYNCHRONOUS": "full",
            "RAFTQ_TOPIC_DEFAULTS__ORDERING": "PRIORITY",
            "RAFTQ_TOPIC_DEFAULTS__RETENTION_MS": "86_400_000",
        }
    )
    assert config.raft.fsync is False
    assert config.raft.heartbeat_ms == 250  # a sibling of the overridden setting is kept
    assert config.broker.id == 2
    assert config.broker.seeds == ("10.0.0.1:9070", "10.0.0.2:9070")
    assert config.storage.synchronous == "FULL"
    assert config.topic_defaults.ordering == "priority"
    assert config.topic_defaults.retention_ms == 86_400_000


def test_env_wins_over_the_broker_file_and_lists_parse_as_toml() -> None:
    config = load(
        {"RAFTQ_BROKER__ID": "7", "RAFTQ_BROKER__SEEDS": '["127.0.0.1:9071"]'},
        path="configs/broker2.yaml",
    )
    assert config.broker.id == 7
    assert config.broker.seeds == ("127.0.0.1:9071",)
    assert config.broker.client_addr == "127.0.0.1:7071"


def test_env_string_settings_are_taken_verbatim() -> None:
    digits = "12345678901234567890"
    assert load({"RAFTQ_BROKER__CLUSTER_SECRET": digits}).broker.cluster_secret == digits
    assert load({"RAFTQ_BROKER__RACK": "true"}).broker.rack == "true"


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTQ_BROKER__ID", "3")
    assert load_config().broker.id == 3


def test_raftq_variables_that_are_not_settings_are_left_alone() -> None:
    assert load({"RAFTQ_TEST_SEED": "42", "PATH": "/bin"}) == load()


# --- validation ----------------------------------------------------------------------------

VIOLATIONS = [
    # (environment, the setting the error must name)
    ({"RAFTQ_RAFT__HEARTBEAT_MS": "1000"}, "raft.heartbeat_ms"),
    ({"RAFTQ_RAFT__ELECTION_TIMEOUT_MIN_MS": "2000"}, "raft.election_timeout_min_ms"),
    ({"RAFTQ_RAFT__MAX_ENTRY_BYTES": "40000000"}, "raft.max_entry_bytes"),
    ({"RAFTQ_RAFT__METADATA_VOTERS": "4"}, "raft.metadata_voters"),
    ({"RAFTQ_RAFT__FSYNC": "maybe"}, "raft.fsync"),
    ({"RAFTQ_TOPIC_DEFAULTS__MAX_RECORD_BYTES": "2096640"}, "topic_defaults.max_record_bytes"),
    (
        {"RAFTQ_TOPIC_DEFAULTS__NACK_BACKOFF_BASE_MS": "60001"},
        "topic_defaults.nack_backoff_base_ms",
    ),
    ({"RAFTQ_TOPIC_DEFAULTS__ORDERING": "lifo"}, "topic_defaults.ordering"),
    ({"RAFTQ_TOPIC_DEFAULTS__PARTITIONS": "0"}, "topic_defaults.partitions"),
    ({"RAFTQ_TOPIC_DEFAULTS__LEASE_MS": "ten"}, "topic_defaults.lease_ms"),
    ({"RAFTQ_STORAGE__SYNCHRONOUS": "EXTRA"}, "storage.synchronous"),
    ({"RAFTQ_GROUPS__SESSION_TIMEOUT_MS": "5000"}, "groups.session_timeout_min_ms"),
    ({"RAFTQ_GROUPS__SESSION_TIMEOUT_MS": "1800001"}, "groups.session_timeout_ms"),
    ({"RAFTQ_GROUPS__HEARTBEAT_INTERVAL_MS": "6000"}, "groups.heartbeat_interval_ms"),
    ({"RAFTQ_CLIENT__LINGER_MS": "30000"}, "client.linger_ms"),
    ({"RAFTQ_CLIENT__REQUEST_TIMEOUT_MS": "1000"}, "raft.election_timeout_max_ms"),
    ({"RAFTQ_CLIENT__BATCH_BYTES_MAX": "4194305"}, "client.batch_bytes_max"),
    ({"RAFTQ_BROKER__ID": "0"}, "broker.id"),
    ({"RAFTQ_BROKER__SEEDS": "a:1,b:1,c:1,d:1"}, "broker.seeds"),
    ({"RAFTQ_BROKER__SEEDS": "a:1,a:1"}, "broker.seeds"),
    ({"RAFTQ_BROKER__SEEDS": ""}, "broker.seeds"),
    ({"RAFTQ_BROKER__CLIENT_ADDR": "localhost"}, "broker.client_addr"),
    ({"RAFTQ_BROKER__METRICS_ADDR": "127.0.0.1:9070"}, "broker.metrics_addr"),
    ({"RAFTQ_BROKER__DATA_DIR": ""}, "broker.data_dir"),
    ({"RAFTQ_BROKER__CLUSTER_SECRET": "short"}, "broker.cluster_secret"),
    ({"RAFTQ_BROKER__RAFT_ADDR": "0.0.0.0:9070"}, "broker.cluster_secret"),
    ({"RAFTQ_RAFT__HEARTBEAT_MSEC": "50"}, "raft.heartbeat_msec"),
    ({"RAFTQ_RAFT_FSYNC": "false"}, "RAFTQ_RAFT_FSYNC"),
    ({"RAFTQ_RAFT__": "1"}, "RAFTQ_RAFT__"),
]


@pytest.mark.parametrize(("env", "setting"), VIOLATIONS, ids=[s for _, s in VIOLATIONS])
def test_a_bad_setting_is_a_config_error_naming_it(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(env)
    assert isinstance(caught.value, ValueError)
    assert caught.value.settings == (setting,)
    assert setting in str(caught.value)
    variable = next(iter(env))
    assert variable in str(caught.value)  # the message says where the bad value came from


def test_relationship_message_names_both_settings_and_values() -> None:
    with pytest.raises(ConfigError) as caught:
        load({"RAFTQ_RAFT__HEARTBEAT_MS": "500", "RAFTQ_RAFT__ELECTION_TIMEOUT_MIN_MS": "300"})
    assert str(caught.value).startswith(
        "raft.heartbeat_ms (500) must be < raft.election_timeout_min_ms (300) / 3"
    )
    with pytest.raises(ConfigError, match=r"raft\.heartbeat_ms \(250\) must be <"):
        load({"RAFTQ_RAFT__HEARTBEAT_MS": "250", "RAFTQ_RAFT__ELECTION_TIMEOUT_MIN_MS": "750"})


def test_unknown_setting_suggests_the_known_one() -> None:
    with pytest.raises(ConfigError, match=r"did you mean raft\.fsync\?"):
        load({"RAFTQ_RAFT__FSNYC": "false"})


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        load({"RAFTQ_RAFT__FSYNC": "2", "RAFTQ_BROKER__ID": "-1", "RAFTQ_CLIENT__LINGER_MS": "x"})
    assert set(caught.value.settings) == {"raft.fsync", "broker.id", "client.linger_ms"}


def test_dev_secret_is_refused_off_loopback_and_a_real_one_is_accepted() -> None:
    public = {"RAFTQ_BROKER__CLIENT_ADDR": "0.0.0.0:7070"}
    with pytest.raises(ConfigError, match=r"broker\.client_addr \(0\.0\.0\.0:7070\) is not"):
        load(public)
    config = load({**public, "RAFTQ_BROKER__CLUSTER_SECRET": SECRET})
    assert not config.broker.uses_dev_secret
    assert load({"RAFTQ_BROKER__CLIENT_ADDR": "[::1]:7070"}).broker.uses_dev_secret


def test_the_secret_never_appears_in_repr_or_errors() -> None:
    config = load({"RAFTQ_BROKER__CLUSTER_SECRET": SECRET})
    assert SECRET not in repr(config)
    with pytest.raises(ConfigError) as caught:
        load({"RAFTQ_BROKER__CLUSTER_SECRET": "tiny-secret"})
    assert "tiny-secret" not in str(caught.value)
    assert "(11 characters)" in str(caught.value)


def test_config_is_frozen_and_replace_revalidates() -> None:
    config = load()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.raft = RaftSettings()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.raft.fsync = False  # type: ignore[misc]
    assert isinstance(config.broker.seeds, tuple)
    with pytest.raises(ConfigError, match=r"raft\.heartbeat_ms \(5000\)"):
        dataclasses.replace(config.raft, heartbeat_ms=5000)
    with pytest.raises(ConfigError, match=r"broker\.seeds \(4 brokers\)"):
        dataclasses.replace(
            config,
            broker=dataclasses.replace(config.broker, seeds=("a:1", "b:1", "c:1", "d:1")),
        )
