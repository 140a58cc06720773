"""Shared fixtures: one embedded broker (Tansu, in memory, free loopback port) per session."""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from statekeeper.kafka.embedded import EmbeddedBroker

# The longest tests and modules, longest first: make test runs on two xdist workers, and a
# long test started last would run on alone while the other worker idles.
RUN_FIRST = (
    "tests/cluster/",  # one xdist group: a Spark cluster per module, ~5 min in all
    "tests/e2e/test_apps_under_kill9.py::test_word_count",
    "tests/airflow/test_supervision.py",
    "tests/e2e/test_apps_under_kill9.py::test_patient_monitoring",
    "tests/airflow/test_state_stores_page.py",
    "tests/spark/test_spark_submit_sigterm.py",
    "tests/e2e/",
    "tests/platform/test_platform_up_down.py",
    "tests/spark/test_app_snapshots.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the collected tests longest-first by :data:`RUN_FIRST` (stable otherwise)."""

    def rank(item: pytest.Item) -> int:
        return next(
            (i for i, prefix in enumerate(RUN_FIRST) if item.nodeid.startswith(prefix)),
            len(RUN_FIRST),
        )

    items.sort(key=rank)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup`` pytest-xdist puts ``@group`` in the node id of every test
    with an ``xdist_group`` mark, and schedules a group on one worker. A pytest it does not
    know silently drops that (every module fixture then runs once per worker): fail fast."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    ungrouped = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
    ]
    if ungrouped:
        raise pytest.UsageError(
            f"pytest-xdist ignored the xdist_group mark of {len(ungrouped)} test(s), e.g. "
            f"{ungrouped[0]}: pytest and pytest-xdist versions do not fit (requirements.in)"
        )


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A running broker; use ``broker.bootstrap_servers``. Topics persist for the session."""
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture(scope="session")
def admin(broker: EmbeddedBroker) -> Any:
    """A confluent_kafka AdminClient connected to the session broker."""
    from statekeeper.kafka.admin import make_admin

    return make_admin(broker.bootstrap_servers)


@pytest.fixture(autouse=True)
def _close_worker_services() -> Iterator[None]:
    """Tests run worker tasks in this process: close the parked tasks and Kafka clients they
    leave (else they live for the session and reconnect, logging, once the broker stops)."""
    yield
    runner = sys.modules.get("statekeeper.worker.task_runner")
    if runner is not None:
        runner.close_worker_services()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (the session broker is shared)."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"
