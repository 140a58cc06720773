"""The fencing rule (changelog.fencing.CommitSplitter) on hand-written partitions, the epoch
stamps of outputs and their readers, and the driver's durable epochs: pure logic."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from statekeeper.app.epoch_base import EPOCH_STRIDE, GENERATION_FILE, next_epoch_base
from statekeeper.changelog.fencing import (
    CommitSplitter,
    begin_record,
    marker_headers,
    marker_key,
    record_headers,
)
from statekeeper.changelog.records import MARKER_KEY, CommitMarker
from statekeeper.errors import ChangelogCorruptError
from statekeeper.kafka.model import KafkaRecord
from statekeeper.placement.registry import TaskPlacementRegistry
from statekeeper.processing.output_headers import EpochFence, OutputHeaders, record_epoch
from statekeeper.processing.repartition_dedupe import RepartitionDedupe


@dataclass
class Msg:
    _offset: int
    _key: bytes
    _value: bytes | None
    _headers: list | None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list | None:
        return self._headers


class Log:
    """One partition, written by hand the way writers of each epoch would."""

    def __init__(self) -> None:
        self.msgs: list[Msg] = []

    def _add(self, key: bytes, value: bytes | None, headers: list | None) -> None:
        self.msgs.append(Msg(len(self.msgs), key, value, headers))

    def data(self, epoch: int, key: str, value: str | None) -> Log:
        self._add(key.encode(), None if value is None else value.encode(), record_headers(epoch))
        return self

    def marker(self, epoch: int, batch: int) -> Log:
        marker = CommitMarker(batch, "0_0", "s", {"in:0": batch + 1}, epoch)
        self._add(marker_key(epoch), marker.encode(), marker_headers(epoch))
        return self

    def begin(self, epoch: int) -> Log:
        self._add(*begin_record(epoch))
        return self


def replay(log: Log, *, fence: int = 0, start: int = 0, chunk: int = 3):
    """State and last marker after reading ``log`` from ``start`` in runs of ``chunk``."""
    state: dict[bytes, bytes | None] = {}
    markers: list[CommitMarker] = []

    def on_commit(records, _count, marker, _offset):
        state.update(records)
        markers.append(marker)

    splitter = CommitSplitter("t[0]", on_commit, fence=fence)
    msgs = log.msgs[start:]
    for i in range(0, len(msgs), chunk):
        run = msgs[i : i + chunk]
        splitter.take(run, [m.key() for m in run])
    live = {k.decode(): v.decode() for k, v in state.items() if v is not None}
    return live, markers, splitter


@pytest.mark.parametrize("chunk", [1, 2, 3, 50])
def test_the_incident_interleaving_keeps_only_the_new_owners_commits(chunk: int) -> None:
    # Epoch 1 commits, the new owner (2) begins, re-runs and commits; the zombie (1) resumes
    # and writes stale records and a marker; the new owner's next marker lands after them.
    log = (
        Log()
        .begin(1)
        .data(1, "a", "1")
        .marker(1, 0)
        .data(1, "a", "2")  # batch 1, never committed by epoch 1
        .begin(2)
        .data(2, "a", "2")
        .data(2, "b", "1")
        .marker(2, 1)
        .data(1, "a", "99")  # the zombie resumes
        .data(1, "c", "7")
        .marker(1, 1)
        .marker(2, 2)
    )
    state, markers, splitter = replay(log, chunk=chunk)
    assert state == {"a": "2", "b": "1"}
    assert [(m.epoch, m.batch_id) for m in markers] == [(1, 0), (2, 1), (2, 2)]
    assert (splitter.fenced.records, splitter.fenced.markers) == (2, 1)
    assert splitter.fence == 2 and not splitter.pending


@pytest.mark.parametrize("chunk", [1, 4, 50])
def test_a_read_resuming_at_the_old_epoch_fences_within_one_run(chunk: int) -> None:
    # A copy checkpointed at epoch 1 reads on: the begin record raises the fence in the
    # middle of a run, and the zombie's records after it in the same run are fenced too.
    log = Log().marker(1, 0).begin(2).marker(2, 0).data(1, "a", "99").marker(1, 1).marker(2, 1)
    state, markers, splitter = replay(log, fence=1, start=1, chunk=chunk)
    assert state == {} and [m.epoch for m in markers] == [2, 2]
    assert (splitter.fenced.records, splitter.fenced.markers) == (1, 1)


def test_without_the_rule_the_zombie_wins() -> None:
    """What a reader ignoring epochs would restore from the same log: the check above can
    fail."""
    log = Log().begin(2).data(2, "a", "2").marker(2, 1).data(1, "a", "99").marker(2, 2)
    naive: dict[bytes, bytes] = {}
    for m in log.msgs:
        if not m.key().startswith(b"\x00"):
            naive[m.key()] = m.value()  # type: ignore[assignment]
    assert naive[b"a"] == b"99"
    assert replay(log)[0] == {"a": "2"}


def test_an_older_epochs_tail_before_the_begin_is_the_new_owners_to_settle() -> None:
    # Written before the new owner began: part of its view, so its marker commits it (the
    # new owner reverts or rolls it forward with records of its own epoch before that).
    log = Log().data(1, "a", "1").marker(1, 0).data(1, "a", "5").begin(2).data(2, "a", "1")
    state, _, splitter = replay(log)
    assert state == {"a": "1"} and splitter.pending == {b"a": b"1"}
    assert splitter.fenced.total == 0


def test_unstamped_logs_read_as_before() -> None:
    msgs = [
        Msg(0, b"a", b"1", None),
        Msg(1, MARKER_KEY, CommitMarker(0, "0_0", "s", {}).encode(), None),
        Msg(2, b"a", b"2", None),
    ]
    state: dict = {}
    splitter = CommitSplitter("t[0]", lambda r, _c, _m, _o: state.update(r))
    splitter.take(msgs, [m.key() for m in msgs])
    assert state == {b"a": b"1"} and splitter.pending == {b"a": b"2"}


def test_epoch_0_writers_are_never_fenced() -> None:
    # An operator tool (statekeeper restore of a stopped app) settles a crashed epoch-2 tail
    # with unstamped records and marker: they commit, as before fencing.
    log = Log().begin(2).data(2, "a", "1").marker(2, 0).data(2, "a", "5")
    log.msgs.append(Msg(len(log.msgs), b"a", b"1", None))
    marker = CommitMarker(0, "0_0", "s", {"in:0": 1})
    log.msgs.append(Msg(len(log.msgs), MARKER_KEY, marker.encode(), None))
    state, markers, splitter = replay(log, chunk=2)
    assert state == {"a": "1"} and markers[-1].epoch == 0 and not splitter.pending
    assert splitter.fenced.total == 0 and splitter.fence == 2
    fence = EpochFence()
    assert [fence.admits(b"t", e) for e in (3, 0, 2)] == [True, True, False]


def test_a_record_of_a_newer_epoch_raises_the_fence_without_a_begin() -> None:
    log = Log().data(3, "a", "1").data(2, "a", "9").marker(3, 0)
    state, _, splitter = replay(log, chunk=1)
    assert state == {"a": "1"} and splitter.fenced.records == 1
    assert splitter.unannounced_epochs() == [3]


def test_a_local_commit_made_after_a_newer_epoch_began_is_detected() -> None:
    # A zombie's store checkpointed at its own (fenced) marker: reading on from there finds
    # the new owner's records without the begin record that came before the marker.
    log = Log().begin(2).data(2, "a", "1").data(1, "a", "9").marker(1, 5).marker(2, 6)
    zombie_marker = 3
    _, _, splitter = replay(log, fence=1, start=zombie_marker + 1)
    assert splitter.unannounced_epochs() == [2]
    # A copy checkpointed before the new owner began sees the begin: a normal catch-up.
    _, _, fine = replay(log, fence=1, start=0)
    assert fine.unannounced_epochs() == []


def test_a_marker_whose_header_disagrees_with_its_body_is_corrupt() -> None:
    marker = CommitMarker(0, "0_0", "s", {}, epoch=1).encode()
    msgs = [Msg(0, marker_key(2), marker, marker_headers(2))]
    with pytest.raises(ChangelogCorruptError, match="epoch 1 but its header says 2"):
        CommitSplitter("t[0]", lambda *_: None).take(msgs, [m.key() for m in msgs])


def test_markers_and_begins_have_keys_compaction_keeps() -> None:
    assert marker_key(0) == MARKER_KEY and marker_key(5) != marker_key(6)
    assert begin_record(5)[0] != begin_record(5)[0]  # one per open: never compacted away
    assert CommitMarker(1, "0_0", "s", {}).encode() == (
        b'{"batch_id":1,"source_offsets":{},"store":"s","task_id":"0_0"}'
    )


def test_outputs_carry_the_epoch_and_readers_fence_older_ones() -> None:
    headers = OutputHeaders("app", "1_0", 7, epoch=4).next(b"t:0:1", [("x", b"y")])
    assert headers[5] == ("sk.epoch", b"4") and record_epoch(headers) == 4
    assert record_epoch(OutputHeaders("app", "1_0", 7).next(b"t:0:1")) == 0
    fence = EpochFence()
    admitted = [fence.admits(b"1_0", e) for e in (1, 1, 2, 1, 2, 3)]
    assert admitted == [True, True, True, False, True, True] and fence.fenced == 1


def _repartition(task: str, batch: int, seq: int, epoch: int, offset: int) -> KafkaRecord:
    headers = OutputHeaders("app", task, batch, epoch)
    headers.seq = seq
    return KafkaRecord("rep", 0, offset, b"k", b"v", 0, headers.next(b"src:0:%d" % offset))


def test_repartition_dedupe_drops_older_epochs_and_persists_the_newest() -> None:
    positions: dict[str, tuple[int, int, int]] = {}
    dedupe = RepartitionDedupe(positions)
    records = [
        _repartition("0_0", 5, 0, 1, 0),
        _repartition("0_0", 5, 0, 2, 1),  # the new owner's re-run: a duplicate
        _repartition("0_0", 5, 1, 2, 2),
        _repartition("0_0", 6, 0, 1, 3),  # the zombie resumes: fenced
    ]
    kept, duplicates = dedupe.filter("rep", records)
    assert [r.offset for r in kept] == [0, 2] and duplicates == 1 and dedupe.fenced == 1
    assert positions == {"rep|0_0": (5, 1, 2)}
    # The persisted epoch fences a later batch of records too.
    again = RepartitionDedupe(positions)
    assert again.filter("rep", [_repartition("0_0", 9, 0, 1, 4)])[0] == []
    assert again.fenced == 1


def test_epochs_grow_across_driver_runs(tmp_path: Path) -> None:
    first = next_epoch_base(tmp_path)
    second = next_epoch_base(tmp_path)
    assert second > first and first % EPOCH_STRIDE == 0
    # A generation in the future (another clock) still gives a larger one next.
    (tmp_path / GENERATION_FILE).write_text(json.dumps({"generation": 9_999_999_999}))
    assert next_epoch_base(tmp_path) == 10_000_000_000 * EPOCH_STRIDE
    (tmp_path / GENERATION_FILE).write_text("{")
    with pytest.raises(ValueError, match="delete it"):
        next_epoch_base(tmp_path)
    registry = TaskPlacementRegistry("app", epoch_base=second)
    assert registry.plan(["0_0"], ["driver"]).epoch_of("0_0") == second + 1
