"""``/metrics``: the status document as Prometheus metrics, parsed back with
prometheus_client's own parser."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from statekeeper.app.metrics_exposition import AppMetrics
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.status import StatusBoard, StatusServer
from statekeeper.settings import StatekeeperSettings
from statekeeper.stores.metrics import StoreMetrics
from statekeeper.worker.task_run import TaskRunResult

from .test_bounded_memory import _Topology

NOW = 1_800_000_000.0

DOC: dict[str, Any] = {
    "application_id": "wc",
    "state": "RUNNING",
    "broker": "tansu",
    "processing_guarantee": "exactly_once",
    "pid": 123,
    "started_at": NOW - 600,
    "totals": {"records_processed": 1500, "records_dlq": 2},
    "throughput": {
        "batches": 7,
        "records_processed": 1500,
        "records_per_s_processing": 750.0,
        "batch_seconds_p50": 0.25,
        "batch_seconds_sum": 2.0,
    },
    "last_batch": {
        "batch_id": 6,
        "records": 100,
        "seconds": 0.2,
        "finished_at": NOW - 1,
        "records_limit": 4000,
    },
    "batch_sizing": {"next_limit": 16000, "ceiling": 2000000, "memory_cap": None},
    "source_partitions": [
        {"topic": "lines", "partition": 0, "task": "0_0", "position": 90, "end": 100},
        {"topic": "lines", "partition": 1, "task": "0_1", "position": 50, "end": 50},
    ],
    "task_live": {
        "0_0": {"source_lag": 10, "restore_progress": {"stores": {"counts": {"restored": 40}}}},
        "0_1": {"source_lag": 0, "restore_progress": None},
    },
    "tasks": {
        "0_0": {
            "committed_batch_id": 6,
            "commits": {"count": 4, "seconds_sum": 0.08, "last_seconds": 0.03},
            "store_entries_approx": {"counts": 55},
            "store_operations": {
                "counts": {
                    "get": {"count": 300, "total_ns": 600_000, "max_ns": 9_000},
                    "put": {"count": 200, "total_ns": 1_000_000, "max_ns": 20_000},
                }
            },
            "restore": [{"store": "counts", "source": "changelog", "records": 40, "seconds": 0.5}],
            "snapshot": {"last_uploaded": {"request_id": "snap-1", "uploaded_at": NOW - 30}},
        },
        "0_1": {"committed_batch_id": 5},
        "1_0": {"snapshot_stored": {"snapshot_id": "old", "created_at_s": NOW - 7200}},
    },
    "snapshot_requests": {"snap-1": {"state": "uploaded"}, "snap-2": {"state": "pending"}},
}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as ((name, sorted labels) -> value)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _get(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_the_collector_exposes_the_status_document() -> None:
    body, content_type = AppMetrics(lambda: DOC, clock=lambda: NOW).render()
    assert content_type == CONTENT_TYPE_LATEST
    s = _samples(body.decode())
    app = {"app": "wc"}
    assert _get(s, "statekeeper_up", **app) == 1
    assert _get(s, "statekeeper_app_state", **app, statekeeper_app_state="RUNNING") == 1
    assert _get(s, "statekeeper_app_state", **app, statekeeper_app_state="ERROR") == 0
    assert _get(s, "statekeeper_app_start_time_seconds", **app) == NOW - 600
    assert _get(s, "statekeeper_records_processed_total", **app) == 1500
    assert _get(s, "statekeeper_records_dlq_total", **app) == 2
    assert _get(s, "statekeeper_records_skipped_total", **app) == 0
    assert _get(s, "statekeeper_batches_total", **app) == 7
    assert _get(s, "statekeeper_batch_duration_seconds_count", **app) == 7
    assert _get(s, "statekeeper_batch_duration_seconds_sum", **app) == 2.0
    assert _get(s, "statekeeper_last_batch_id", **app) == 6
    assert _get(s, "statekeeper_last_batch_records_limit", **app) == 4000
    assert _get(s, "statekeeper_batch_records_limit", **app) == 16000
    assert _get(s, "statekeeper_batch_records_ceiling", **app) == 2_000_000
    # Not sampled yet: left out, not exposed as 0.
    assert ("statekeeper_batch_records_memory_cap", (("app", "wc"),)) not in s
    lag = {**app, "task": "0_0", "topic": "lines", "partition": "0"}
    assert _get(s, "statekeeper_source_lag_records", **lag) == 10
    assert (
        _get(s, "statekeeper_source_lag_records", **{**lag, "task": "0_1", "partition": "1"}) == 0
    )
    assert _get(s, "statekeeper_task_source_lag_records", **app, task="0_0") == 10
    task = {**app, "task": "0_0"}
    assert _get(s, "statekeeper_task_commit_duration_seconds_count", **task) == 4
    assert _get(s, "statekeeper_task_commit_duration_seconds_sum", **task) == 0.08
    assert _get(s, "statekeeper_task_last_commit_duration_seconds", **task) == 0.03
    assert _get(s, "statekeeper_task_committed_batch_id", **app, task="0_1") == 5
    store = {**task, "store": "counts"}
    assert _get(s, "statekeeper_store_entries", **store) == 55
    put = {**store, "operation": "put"}
    assert _get(s, "statekeeper_store_operation_duration_seconds_count", **put) == 200
    assert _get(s, "statekeeper_store_operation_duration_seconds_sum", **put) == 0.001
    assert _get(s, "statekeeper_store_operation_max_duration_seconds", **put) == 2e-5
    restore = {**store, "source": "changelog"}
    assert _get(s, "statekeeper_store_restore_records", **restore) == 40
    assert _get(s, "statekeeper_store_restore_records_per_second", **restore) == 80
    assert _get(s, "statekeeper_store_restore_progress_records", **store) == 40
    assert _get(s, "statekeeper_snapshot_age_seconds", **task) == 30
    assert ("statekeeper_snapshot_age_seconds", (("app", "wc"), ("task", "0_1"))) not in s
    assert _get(s, "statekeeper_snapshot_age_seconds", **app, task="1_0") == 7200
    assert _get(s, "statekeeper_snapshot_requests", **app, state="pending") == 1
    assert _get(s, "statekeeper_snapshot_requests", **app, state="failed") == 0


def test_an_app_in_error_is_down_and_a_bare_document_still_renders() -> None:
    s = _samples(AppMetrics(lambda: {"application_id": "x", "state": "ERROR"}).render()[0].decode())
    assert _get(s, "statekeeper_up", app="x") == 0
    assert _get(s, "statekeeper_app_state", app="x", statekeeper_app_state="ERROR") == 1
    assert _get(s, "statekeeper_records_processed_total", app="x") == 0


def test_each_app_has_its_own_registry_and_reads_at_scrape_time() -> None:
    docs = [dict(DOC, application_id="a"), dict(DOC, application_id="b")]
    first, second = AppMetrics(lambda: docs[0]), AppMetrics(lambda: docs[1])
    assert 'app="a"' in first.render()[0].decode()
    assert 'app="b"' in second.render()[0].decode()
    docs[0] = {**docs[0], "totals": {"records_processed": 9}}
    s = _samples(first.render()[0].decode())
    assert _get(s, "statekeeper_records_processed_total", app="a") == 9
    assert REGISTRY.get_sample_value("statekeeper_up", {"app": "a"}) is None  # not global


def test_store_metrics_drain_deltas() -> None:
    metrics = StoreMetrics("counts")
    metrics.op("put").record(1_000, 2)
    metrics.op("get").record(500)
    assert metrics.drain() == {
        "get": {"count": 1, "total_ns": 500, "max_ns": 500},
        "put": {"count": 2, "total_ns": 1_000, "max_ns": 1_000},
    }
    assert metrics.drain() == {}
    metrics.op("put").record(300)
    assert metrics.drain() == {"put": {"count": 1, "total_ns": 300, "max_ns": 300}}


def _result(batch: int, *, commit_s: float | None, puts: int) -> TaskRunResult:
    result = TaskRunResult("0_0", batch, committed=commit_s is not None, committed_batch_id=batch)
    result.commit_ran = commit_s is not None
    result.seconds = {"commit": commit_s if commit_s is not None else 0.001}
    result.store_operations = {
        "counts": {"put": {"count": puts, "total_ns": 1_000 * puts, "max_ns": 1_000 * batch}}
    }
    return result


def test_the_app_sums_task_results_and_serves_them_on_metrics(tmp_path: Path) -> None:
    app = StatekeeperApp(
        _Topology(),
        StatekeeperSettings(
            bootstrap_servers="127.0.0.1:1",
            application_id="sums",
            state_dir=tmp_path / "state",
            checkpoint_dir=tmp_path / "checkpoints",
            status_port=None,
        ),
    )
    app._note_committed([_result(1, commit_s=0.02, puts=10)])
    app._note_committed([_result(2, commit_s=None, puts=5)])  # no commit in this run
    app._note_committed([_result(3, commit_s=0.04, puts=1)])
    task = app.board.snapshot()["tasks"]["0_0"]
    assert task["commits"] == {"count": 2, "seconds_sum": 0.06, "last_seconds": 0.04}
    assert task["store_operations"]["counts"]["put"] == {
        "count": 16,
        "total_ns": 16_000,
        "max_ns": 3_000,
    }
    server = StatusServer(app.board, metrics=AppMetrics(app.board.snapshot).render).start()
    try:
        url = server.url.replace("/status", "/metrics")
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE_LATEST
            s = _samples(resp.read().decode())
    finally:
        server.stop()
    put = {"app": "sums", "task": "0_0", "store": "counts", "operation": "put"}
    assert _get(s, "statekeeper_store_operation_duration_seconds_count", **put) == 16
    assert _get(s, "statekeeper_task_commit_duration_seconds_count", app="sums", task="0_0") == 2


def test_metrics_is_404_without_a_renderer(tmp_path: Path) -> None:
    server = StatusServer(StatusBoard("plain")).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url.replace("/status", "/metrics"), timeout=5)
        assert err.value.code == 404
    finally:
        server.stop()
