"""Executor services in a process of their own (``executor_services_process``): word_count
on local Spark with a query server. Its answers come from the service process (not a Python
worker running tasks), match the recomputed counts, and the process ends with the app."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_apps.word_count import reference
from spark_apps.word_count.generator import word_count_lines
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.process_identity import ProcessIdentity
from statekeeper.query.client import QueryClient
from statekeeper.testing.cluster_watch import placement, query_url, wait_drained
from tests.e2e.harness import AppUnderTest

PARTITIONS = 2
STORE = "word-counts"
pytestmark = [pytest.mark.timeout(300)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_queries_are_served_by_the_service_process_which_ends_with_the_app(
    broker: Any, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic = f"lines-{suffix}"
    produce(bootstrap, topic, word_count_lines(4_000, seed=3), partitions=PARTITIONS)
    app = AppUnderTest.create(
        "word_count",
        bootstrap,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": f"word-counts-{suffix}"},
        query_port=0,
        executor_services_process=True,
        commit_interval_ms=200,
        trigger_interval_ms=100,
    )
    proc = app.process(0, stop_when_idle=False).start()
    try:
        status = proc.wait_for(
            lambda s: bool(
                ((placement(s).get("executor_reports") or {}).get("driver") or {}).get("query")
            ),
            180,
        )
        report = placement(status)["executor_reports"]["driver"]
        services = ProcessIdentity.of(int(report["pid"]))
        assert "statekeeper.worker.service_process" in _cmdline(services.pid), report
        wait_drained(proc, bootstrap)
        expected = reference.recompute(read_topic(bootstrap, topic)).counts
        client = QueryClient(query_url(proc.status() or status, "driver"))
        words = sorted(expected)[:40]
        deadline = time.monotonic() + 60
        while True:  # the copy answers the last commit: wait for the one after the drain
            answers = {w: client.get(STORE, w) for w in words}
            got = {w: a.get("value") for w, a in answers.items()}
            if got == {w: expected[w] for w in words} or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert got == {w: expected[w] for w in words}
        assert {a["source"] for a in answers.values()} == {"active"}
        proc.terminate()
        assert proc.wait(120) == 0
        # Before the clean-up below kills what is left of the app's process group.
        deadline = time.monotonic() + 15
        while services.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not services.alive(), "the service process outlived the app"
        log = (app.settings.state_dir / app.settings.application_id / ".executor").joinpath(
            "services.log"
        )
        assert "services stop" in log.read_text()  # the group's SIGTERM or the JVM's end
    finally:
        proc.kill9()
