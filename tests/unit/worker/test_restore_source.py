"""Where a store got its state, as the status and the restore listeners report it."""

from __future__ import annotations

from types import SimpleNamespace

from statekeeper.stores import Stores
from statekeeper.worker.task_snapshots import restore_source

PERSISTENT = Stores.persistent("counts")
IN_MEMORY = Stores.in_memory("mem")


def _outcome(full: bool) -> SimpleNamespace:
    return SimpleNamespace(full=full, last_marker=object(), restored_records=1)


def test_a_snapshot_install_then_a_tail_names_the_snapshot():
    install = {"source": "snapshot", "snapshot_id": "s1", "bytes_downloaded": 10, "fallbacks": []}
    out = restore_source(_outcome(False), PERSISTENT, install)
    assert out["source"] == "snapshot" and out["snapshot_id"] == "s1"
    assert out["bytes_downloaded"] == 10 and "snapshot_fallbacks" not in out


def test_no_usable_snapshot_is_a_full_replay_with_the_reasons():
    rejected = [{"snapshot_id": "s1", "reason": "file x is missing"}]
    install = {"source": "full replay", "fallbacks": rejected, "note": "no snapshot verified"}
    out = restore_source(_outcome(True), PERSISTENT, install)
    assert out == {
        "source": "full replay",
        "snapshot_fallbacks": rejected,
        "snapshot_note": "no snapshot verified",
    }


def test_a_snapshot_the_restorer_rejected_later_is_a_full_replay():
    # E.g. its marker is outside the changelog: the restorer wipes it and replays fully.
    install = {"source": "snapshot", "snapshot_id": "s1"}
    assert restore_source(_outcome(True), PERSISTENT, install)["source"] == "full replay"


def test_in_memory_and_local_state():
    assert restore_source(_outcome(True), IN_MEMORY, None)["source"] == (
        "changelog (in-memory store)"
    )
    assert restore_source(_outcome(False), PERSISTENT, None) == {"source": "local state"}
    assert restore_source(_outcome(True), PERSISTENT, None) == {"source": "full replay"}


def test_a_first_start_with_nothing_committed_is_new_not_a_full_replay():
    first = SimpleNamespace(full=True, last_marker=None, restored_records=0)
    install = {"source": "full replay", "note": "no snapshot of task 0_0 store counts"}
    assert restore_source(first, PERSISTENT, install) == {"source": "new"}
    assert restore_source(first, IN_MEMORY, None) == {"source": "new"}
    replayed = SimpleNamespace(full=True, last_marker=None, restored_records=3)
    assert restore_source(replayed, PERSISTENT, None)["source"] == "full replay"
