"""App states, app specs and the status endpoint (pure logic + a loopback HTTP server)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from statekeeper.app.launcher import parse_overrides
from statekeeper.app.lifecycle import AppState, AppStateMachine
from statekeeper.app.spec import load_app_spec
from statekeeper.app.status import StatusBoard, StatusServer
from statekeeper.errors import ConfigError, StatekeeperError


def test_state_machine_follows_kafka_streams_states_and_notifies() -> None:
    seen: list[tuple[str, str]] = []
    machine = AppStateMachine([lambda new, old: seen.append((old.value, new.value))])
    for state in (
        AppState.REBALANCING,
        AppState.RESTORING,
        AppState.RUNNING,
        AppState.PENDING_SHUTDOWN,
        AppState.NOT_RUNNING,
    ):
        machine.transition(state)
    assert seen == [
        ("CREATED", "REBALANCING"),
        ("REBALANCING", "RESTORING"),
        ("RESTORING", "RUNNING"),
        ("RUNNING", "PENDING_SHUTDOWN"),
        ("PENDING_SHUTDOWN", "NOT_RUNNING"),
    ]


def test_invalid_transition_is_refused_and_listener_errors_are_contained() -> None:
    def broken(new: AppState, old: AppState) -> None:
        raise RuntimeError("listener bug")

    machine = AppStateMachine([broken])
    with pytest.raises(StatekeeperError, match="CREATED -> RUNNING"):
        machine.transition(AppState.RUNNING)
    machine.transition(AppState.REBALANCING)  # the broken listener does not stop the app
    machine.transition(AppState.ERROR, error="boom")
    assert machine.state is AppState.ERROR and machine.error == "boom"


SPEC_YAML = """
application_id: wc
topology: statekeeper.app.launcher:parse_overrides
params: {pairs: []}
settings: {max_records_per_batch: 1234, bootstrap_servers: "127.0.0.1:1"}
spark: {conf: {spark.sql.shuffle.partitions: "2"}}
"""


def test_yaml_and_toml_specs_load_and_env_overrides_the_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(SPEC_YAML)
    spec = load_app_spec(path)
    settings = spec.resolved_settings()
    assert settings.application_id == "wc" and settings.max_records_per_batch == 1234
    assert spec.build_topology() == {}
    monkeypatch.setenv("STATEKEEPER_MAX_RECORDS_PER_BATCH", "99")
    assert spec.resolved_settings().max_records_per_batch == 99
    toml = tmp_path / "app.toml"
    toml.write_text(
        'application_id = "wc"\ntopology = "statekeeper.app.launcher:parse_overrides"\n'
        "[params]\npairs = []\n"
    )
    assert load_app_spec(toml).application_id == "wc"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("application_id: wc\n", "topology"),
        ("application_id: wc\ntopology: nomodule\n", "topology"),
        (
            "application_id: wc\ntopology: a.b:c\nsettings: {max_records_per_batch: 0}\n",
            "max_records_per_batch",
        ),
        ("application_id: wc\ntopology: a.b:c\nunknown: 1\n", "unknown"),
        ("- a list\n", "mapping"),
        ("application_id: [\n", "not valid yaml"),
    ],
)
def test_bad_specs_fail_with_a_clear_message(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_app_spec(path)


def test_missing_topology_module_is_a_config_error(tmp_path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text("application_id: wc\ntopology: no_such_module_xyz:build\n")
    with pytest.raises(ConfigError, match="cannot import"):
        load_app_spec(path).build_topology()


def test_overrides_parse_json_values() -> None:
    assert parse_overrides(["a=1", "b=x", "c=null"]) == {"a": 1, "b": "x", "c": None}
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["novalue"])


def test_status_served_on_loopback_and_written_atomically(tmp_path) -> None:
    board = StatusBoard("wc", tmp_path / "status.json")
    board.add_provider(lambda: {"live": 42})
    server = StatusServer(board).start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        board.update(state="RUNNING")
        board.update_task("0_1", source_lag=5)
        with urllib.request.urlopen(server.url, timeout=5) as resp:
            doc = json.load(resp)
        assert doc["state"] == "RUNNING" and doc["live"] == 42
        assert doc["tasks"]["0_1"]["source_lag"] == 5
        assert json.loads((tmp_path / "status.json").read_text())["state"] == "RUNNING"
        board.update(state="ERROR")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url.replace("/status", "/health"), timeout=5)
        assert err.value.code == 503
    finally:
        server.stop()


def test_status_file_writes_from_two_threads_do_not_collide(tmp_path):
    import threading

    board = StatusBoard("app", tmp_path / "status.json")
    errors: list[BaseException] = []

    def write_many() -> None:
        try:
            for i in range(200):
                board.update(step=i)
        except BaseException as exc:  # a lost rename race raised FileNotFoundError here
            errors.append(exc)

    threads = [threading.Thread(target=write_many) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (tmp_path / "status.json").exists()
