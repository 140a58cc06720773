"""ChangelogWriter against the real (embedded) broker: markers after their records, failures."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.changelog.records import MARKER_KEY, CommitMarker
from statekeeper.changelog.writer import ChangelogWriter
from statekeeper.errors import ProduceError
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.embedded import EmbeddedBroker, free_port
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.kafka.range_reader import read_ranges


def test_markers_land_after_their_records_and_report_their_offsets(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 2)
    writer = ChangelogWriter(producer_config(broker.bootstrap_servers))
    try:
        for batch in range(3):
            for p in range(2):
                writer.send_all(topic_name, p, [(b"k%d" % i, b"%d" % batch) for i in range(500)])
            markers = [
                (topic_name, p, CommitMarker(batch, f"0_{p}", "s", {"in:0": batch}))
                for p in range(2)
            ]
            offsets = writer.write_markers(markers, 15)
            assert set(offsets) == {(topic_name, 0), (topic_name, 1)}
    finally:
        writer.close()
    assert writer.records_sent == 3000

    conf = consumer_config(broker.bootstrap_servers)
    ends = log_end_offsets(conf, [(topic_name, p) for p in range(2)])
    out = read_ranges(conf, [OffsetRange(t, p, 0, end) for (t, p), end in ends.items()])
    for p in range(2):
        records = out[tp_key(topic_name, p)]
        assert len(records) == 3 * 501
        # Each batch: its 500 records, then its marker; the last marker's offset was reported.
        for batch in range(3):
            chunk = records[batch * 501 : (batch + 1) * 501]
            assert all(r.key != MARKER_KEY and r.value == b"%d" % batch for r in chunk[:500])
            assert chunk[500].key == MARKER_KEY
        assert offsets[(topic_name, p)] == records[-1].offset


def test_unacknowledged_records_fail_the_flush_and_the_markers():
    config = producer_config(f"127.0.0.1:{free_port()}", **{"message.timeout.ms": 1000})
    writer = ChangelogWriter(config)
    writer.send_all("nowhere", 0, [(b"k", b"v")])
    with pytest.raises(ProduceError, match="not acknowledged"):
        writer.write_markers([("nowhere", 0, CommitMarker(1, "0_0", "s", {}))], 3)
    writer.flush(1)  # reported once; nothing left behind to be sent later
    writer.close(0)


def test_a_record_the_broker_rejects_is_reported_by_flush(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 1)
    writer = ChangelogWriter(producer_config(broker.bootstrap_servers))
    writer.send(topic_name, 0, b"k", b"v")
    writer.flush(10)  # metadata known now
    with pytest.raises(ProduceError, match=rf"{topic_name}"):
        writer.send(topic_name, 7, b"k", b"v")
        writer.flush(5)
    writer.close(0)


def test_a_write_larger_than_the_client_queue_waits_for_room(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    """150,000 records in one call: more than the client's local queue holds (100,000),
    written by a new idempotent producer (which acks nothing for its first moments); the
    writer serves deliveries until each fits instead of failing (a 1M-key migration in
    4 tasks failed with BufferError before)."""
    ensure_topic(admin, topic_name, 1)
    writer = ChangelogWriter(producer_config(broker.bootstrap_servers))
    try:
        writer.send_all(topic_name, 0, [(b"k%d" % i, b"v") for i in range(150_000)])
        writer.flush(60)
    finally:
        writer.close()
    assert writer.records_sent == 150_000
    conf = consumer_config(broker.bootstrap_servers)
    assert log_end_offsets(conf, [(topic_name, 0)]) == {(topic_name, 0): 150_000}
