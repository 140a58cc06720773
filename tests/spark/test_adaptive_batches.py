"""Adaptive micro-batches on Spark: word_count works through a backlog in batches that start
at ``min_records_per_batch``, grow while each batch is full, never admit more than the limit
the driver handed the source, and shrink once caught up; the counts stay exact."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spark_apps.word_count import reference
from spark_apps.word_count.generator import word_count_lines
from statekeeper.app.metrics_exposition import AppMetrics
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from tests.e2e.harness import AppUnderTest

PARTITIONS = 4
LINES = 12_000
pytestmark = [pytest.mark.timeout(300)]


def test_batches_grow_under_backlog_stay_within_their_limit_and_shrink_when_caught_up(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    topic = f"lines-{suffix}"
    lines = word_count_lines(LINES, seed=11)
    produce(broker.bootstrap_servers, topic, lines, partitions=PARTITIONS)
    app = AppUnderTest.create(
        "word_count",
        broker.bootstrap_servers,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": f"word-counts-{suffix}"},
        min_records_per_batch=1_000,
        max_records_per_batch=30_000,
        batch_target_ms=400,
        trigger_interval_ms=50,
    )
    running = StatekeeperApp(app.spec.build_topology(), app.settings)
    batches: list[dict[str, Any]] = []
    running.add_batch_listener(lambda batch, _positions: batches.append(batch))
    running.run(stop_when_idle=True, idle_s=1.0)

    limits = [b["records_limit"] for b in batches]
    admitted = [b["records_admitted"] for b in batches]
    print("admitted/limit per batch:", list(zip(admitted, limits, strict=True)))
    assert limits[0] == 1_000
    # The driver's time per phase of each batch (statekeeper_app._process_batch).
    assert all(set(b["driver_s"]) == {"ranges", "plan", "execute", "record"} for b in batches)
    assert all(b["driver_s"]["execute"] <= b["seconds"] for b in batches)
    # The source planned every batch under the limit the driver wrote for it.
    assert all(a <= lim for a, lim in zip(admitted, limits, strict=True)), (admitted, limits)
    # Full batches made the next one larger, up to the ceiling at most.
    assert max(limits) >= 8_000 and max(limits) <= 30_000, limits
    for (a, lim), nxt in zip(zip(admitted, limits, strict=True), limits[1:], strict=False):
        if a >= lim:  # full: at most 4x up, half down (a slow batch)
            assert lim // 2 <= nxt <= 4 * lim, (a, lim, nxt)
    # The last batch drained the backlog: the limit decays (halves, keeping twice what it
    # admitted as headroom, never above the last one).
    status = json.loads(Path(app.settings.status_file).read_text())
    sizing = status["batch_sizing"]
    assert admitted[-1] < limits[-1]
    decayed = min(limits[-1], max(limits[-1] // 2, 2 * admitted[-1]))
    assert sizing["next_limit"] == max(1_000, decayed), (sizing, admitted[-1], limits[-1])
    assert sizing["record_bytes_sampled"] and sizing["memory_cap"] > 30_000
    exposed = AppMetrics(lambda: status).render()[0].decode()
    metrics = {
        family.name: family.samples[0].value
        for family in text_string_to_metric_families(exposed)
        if family.name.startswith("statekeeper_batch_records") and family.samples
    }
    assert metrics["statekeeper_batch_records_limit"] == sizing["next_limit"], metrics
    assert metrics["statekeeper_batch_records_ceiling"] == 30_000

    # RocksDB's per-process bound and each worker's usage (stores.rocksdb_memory).
    memory = status["rocksdb_memory"]
    bound = app.settings.block_cache_bytes
    assert memory["block_cache_bytes_per_worker"] == bound
    workers = memory["workers"].values()
    assert workers and all(w["block_cache_bytes"] == bound for w in workers)
    assert all(0 < w["write_buffer_usage_bytes"] <= w["block_cache_usage_bytes"] for w in workers)

    expected = reference.recompute(read_topic(broker.bootstrap_servers, topic))
    counts = read_store(app.settings, app.spec.build_topology(), "word-counts", PARTITIONS)
    assert counts == expected.counts
