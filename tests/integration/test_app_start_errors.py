"""An app that cannot start ends in ERROR with a clear message (no Spark needed)."""

from __future__ import annotations

import json

import pytest

from spark_apps.word_count.topology import build_topology
from statekeeper.app.lifecycle import AppState
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.errors import ConfigError
from statekeeper.settings import load_settings


def test_missing_source_topic_is_an_error_state_with_a_clear_message(broker, tmp_path) -> None:
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id="no-input",
        state_dir=tmp_path / "state",
        checkpoint_dir=tmp_path / "ckpt",
        status_port=None,
    )
    seen: list[tuple[str, str]] = []
    app = StatekeeperApp(
        build_topology(input_topic="no-such-topic-xyz"),
        settings,
        listeners=[lambda new, old: seen.append((old.value, new.value))],
    )
    with pytest.raises(ConfigError, match="no-such-topic-xyz.*do not exist"):
        app.run()
    assert app.state is AppState.ERROR
    assert seen == [("CREATED", "REBALANCING"), ("REBALANCING", "ERROR")]
    status = json.loads((tmp_path / "state" / "no-input" / "status.json").read_text())
    assert status["state"] == "ERROR" and "no-such-topic-xyz" in status["error"]
