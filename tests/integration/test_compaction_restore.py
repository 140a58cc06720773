"""Compaction safety on a real broker: histories built and compacted by the property test's
harness (tests/unit/state/test_compaction_safety.py), copied record by record into fresh
changelog topics of the embedded broker (which never compacts by itself), then restored by
a real task (real ChangelogRestorer, consumer, reconcile) without local state: the stores
must hold the last committed batch. Offsets are not kept (the copy closes the gaps), so only
full restores are checked here; partial restores after compaction are the unit test's."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.changelog.records import changelog_topic
from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment

from ..unit.state.test_compaction_safety import (
    SPECS,
    STEPS,
    STORES,
    TOPICS,
    Broker,
    Harness,
    run_steps,
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=STEPS, data=st.data())
def test_full_restore_of_a_compacted_copy_equals_the_committed_state(broker, steps, data):
    memory = Broker()
    with tempfile.TemporaryDirectory() as tmp, memory.patch():
        harness = Harness(Path(tmp), memory, bounded=True)
        run_steps(harness, steps, data)
        harness.close()
        harness.compact(data)  # one more cleaner pass before the copy
        committed = harness.committed

    app = f"compaction-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        env = StateEnvironment(
            load_settings(
                bootstrap_servers=broker.bootstrap_servers,
                state_dir=Path(tmp) / "state",
                application_id=app,
            )
        )
        try:
            env.ensure_changelogs(SPECS, 1)
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
            for store in STORES:
                for record in memory.logs[(TOPICS[store], 0)].records:
                    producer.produce(
                        changelog_topic(app, store), record.value, record.key, partition=0
                    )
            assert producer.flush(10) == 0
            with env.task("0_0", 0, SPECS) as task:
                assert all(o.full for o in task.restore_outcomes)
                state = {name: dict(task.store(name).all()) for name in STORES}
                assert state == committed
        finally:
            env.close()
