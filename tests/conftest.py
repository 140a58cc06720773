"""Shared fixtures: one embedded broker (Tansu, in memory, free loopback port) per session."""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from statekeeper.kafka.embedded import EmbeddedBroker


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
