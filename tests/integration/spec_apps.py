"""An app spec on disk with committed local state: what the ops commands (snapshot, restore,
stores) run against. The topology is test_changelog_audit's (stores ``totals`` and
``windows``); every value is a parameter because the tests assert on them."""

from __future__ import annotations

import uuid
from pathlib import Path

from statekeeper.kafka.admin import ensure_topic
from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment

from .test_changelog_audit import TOPOLOGY_FILE, _topology


def spec_app_with_state(
    admin,
    broker,
    tmp_path: Path,
    *,
    prefix: str,
    entries: int,
    batch_id: int,
    window_offset: int = 0,
    extra_settings: str = "",
) -> tuple[Path, str]:
    """Write ``app.yaml`` (+ its topology file) and commit ``entries`` keys per task into both
    stores of tasks 0_0 and 0_1 (``user-<partition>-<i>``: totals ``i``, windows
    ``i + window_offset`` at window 10,000) as batch ``batch_id``; returns (spec, app id)."""
    app_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    source = f"{app_id}-input"
    ensure_topic(admin, source, 2)
    (tmp_path / "topo.py").write_text(TOPOLOGY_FILE)
    state_dir = tmp_path / "state"
    spec = tmp_path / "app.yaml"
    spec.write_text(
        f"application_id: {app_id}\ntopology: topo.py:build\n"
        f"params: {{input_topic: {source}}}\n"
        f"settings: {{bootstrap_servers: '{broker.bootstrap_servers}', state_dir: '{state_dir}'"
        f"{extra_settings}}}\n"
    )
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers, state_dir=state_dir, application_id=app_id
    )
    specs = _topology(source).store_specs(0)
    env = StateEnvironment(settings)
    env.ensure_changelogs(specs, 2)
    try:
        for partition in range(2):
            with env.task(f"0_{partition}", partition, specs) as task:
                totals, windows = task.store("totals"), task.store("windows")
                for i in range(entries):
                    totals.put(f"user-{partition}-{i}", i)
                    windows.put(f"user-{partition}-{i}", i + window_offset, 10_000)
                task.commit(batch_id, {f"{source}:{partition}": entries})
    finally:
        env.close()
    return spec, app_id
