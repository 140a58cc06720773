"""Check b: consistency. The restored store against the live one, key by key, at the live
store's own commit. Never writes, restores, wipes or locks anything in the live task
directory: the live task is read through :mod:`statekeeper.ops.live_task`.

- App stopped (nobody holds the task lock): each live store is read exactly as its last
  commit left it (no changelog restorer runs, no task lock is taken, no file in the live
  directory is written). Its committed marker is first checked against the changelog
  (:func:`~statekeeper.ops.live_task.verify_live_commit`): a marker offset past the log end
  or below its start, a missing record or one that is not the marker of the live store's
  batch, or a fenced writer's commit fails the check, naming the store, the offsets and why;
  the live store is reported, never repaired. Then:

  - the restored copy stands at the live store's batch and marker: every key must match;
  - it does not (the changelog holds commits the live store never got, e.g. the task ran
    on; or the live store is ahead of the snapshot restored): a copy is rebuilt here to the
    live store's marker, from the restored snapshot when its marker is at or below the live
    one, else from the changelog's start, with the same fencing rule the restorer applies
    (:class:`~statekeeper.changelog.fencing.CommitSplitter`), and compared with the live store
    key by key. When no such copy can be built (the changelog no longer holds the records),
    the check fails "not aligned", naming both commits.

- App running (another process holds the task lock, seen in the kernel's lock table without
  trying it): the live store is not read (it moves under the app), so the restored store is
  compared with the snapshot it came from plus the changelog records between the snapshot's
  marker and the restored marker, re-applied here independently of the restorer. A store that
  did not come from a snapshot is then skipped (the truth check still runs).
- No live copy on this machine, or an incomplete one: skipped. In-memory and LRU stores have
  no copy on disk: skipped (the truth check still runs).
"""

from __future__ import annotations

from statekeeper.changelog.fencing import CommitSplitter
from statekeeper.changelog.records import RESERVED_KEY_PREFIX, CommitMarker, changelog_topic
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.offsets import log_start_offsets
from statekeeper.kafka.range_reader import iter_partition_runs, read_ranges
from statekeeper.ops.drill.contents import Contents, diff_contents, show_key
from statekeeper.ops.drill.record import FAIL, PASS, SKIPPED, CheckResult
from statekeeper.ops.drill.sandbox import RestoredStore, RestoredTask
from statekeeper.ops.live_task import (
    LiveStore,
    LiveStoreUnreadableError,
    has_local_copy,
    lock_holder,
    read_live_task,
    verify_live_commit,
)
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.window_bytes import split_changelog_window_key


def _compare(
    spec: StoreSpec, expected: Contents, actual: Contents, what: str, against: str
) -> CheckResult:
    """PASS when ``actual`` (described by ``against``) equals ``expected`` (``what``)."""
    diff = diff_contents(expected, actual)
    if diff.equal:
        return CheckResult(PASS, f"{len(expected)} keys equal to {what}")
    return CheckResult(
        FAIL,
        diff.describe(what, against),
        [show_key(spec, k) for k in diff.examples],
        diff.counts(),
    )


def _result(store: RestoredStore, expected: Contents, what: str) -> CheckResult:
    return _compare(store.spec, expected, store.contents, what, "the restored copy")


def check_consistency(
    settings: StatekeeperSettings, task: RestoredTask
) -> tuple[str, dict[str, CheckResult]]:
    """Check b for every store of ``task``: (how it ran, result per store). See the module
    docstring; nothing in the live task directory is written, locked or repaired."""
    directory = TaskDirectory(settings.state_dir, settings.application_id, task.task_id)
    if not directory.path.is_dir():
        mode = f"no live copy of task {task.task_id} under {settings.state_dir}"
        return mode, {name: CheckResult(SKIPPED, mode) for name in task.stores}
    holder = lock_holder(directory)
    if holder is not None:
        mode = (
            f"app running (task locked by PID {holder}): compared with the "
            "snapshot plus the changelog records up to the restored marker"
        )
        return mode, {
            name: _against_snapshot(settings, task, store) for name, store in task.stores.items()
        }
    missing = [
        s.name
        for s in task.specs
        if s.persistent
        and s.logging_enabled
        and not has_local_copy(s, directory.store_path(s.name))
    ]
    if missing:
        mode = f"live copy incomplete (no local {', '.join(missing)}): nothing to compare"
        return mode, {name: CheckResult(SKIPPED, mode) for name in task.stores}
    mode = (
        "app stopped: live stores read as last committed (no restore, no lock, nothing "
        "written) and compared key by key at their own marker"
    )
    return mode, _against_live(settings, task)


def _against_live(settings: StatekeeperSettings, task: RestoredTask) -> dict[str, CheckResult]:
    try:
        live = read_live_task(settings, task.task_id, task.specs)
    except LiveStoreUnreadableError as exc:
        return {
            name: CheckResult(FAIL, f"the live copy of task {task.task_id} is unreadable: {exc}")
            for name in task.stores
        }
    results: dict[str, CheckResult] = {}
    for name, store in task.stores.items():
        if not store.spec.logging_enabled:
            results[name] = CheckResult(SKIPPED, "logging disabled: nothing restored")
        elif not store.spec.persistent:
            results[name] = CheckResult(
                SKIPPED,
                f"{store.spec.kind} store: its entries live only in the app's process, no live "
                "copy on disk to compare (the truth check still runs)",
            )
        elif name in live.unreadable:
            results[name] = CheckResult(SKIPPED, live.unreadable[name])
        elif (found := live.stores.get(name)) is None:
            results[name] = CheckResult(SKIPPED, f"no live copy of store {name} on disk")
        else:
            results[name] = _against_live_store(settings, task, store, found)
    return results


def _against_live_store(
    settings: StatekeeperSettings, task: RestoredTask, store: RestoredStore, live: LiveStore
) -> CheckResult:
    meta = live.metadata
    problem = verify_live_commit(settings, store.spec.name, task.partition, meta)
    if problem is not None:
        return CheckResult(
            FAIL,
            f"live store {store.spec.name} of task {task.task_id} (batch {meta.batch_id}, "
            f"marker offset {meta.changelog_offset}) is inconsistent with its changelog: "
            f"{problem}. Reported, not repaired (the app's next open rebuilds it)",
        )
    assert live.contents is not None
    restored = store.metadata
    if (meta.batch_id, meta.changelog_offset) == (restored.batch_id, restored.changelog_offset):
        return _result(
            store,
            live.contents,
            f"the live store (batch {meta.batch_id}, marker offset {meta.changelog_offset})",
        )
    not_aligned = (
        f"not aligned: live store at batch {meta.batch_id} (marker offset "
        f"{meta.changelog_offset}), restored copy at batch {restored.batch_id} (marker offset "
        f"{restored.changelog_offset})"
    )
    rebuilt = _restore_to_marker(settings, task, store, live)
    if isinstance(rebuilt, str):
        return CheckResult(FAIL, f"{not_aligned}; {rebuilt}")
    expected, origin = rebuilt
    return _compare(
        store.spec,
        expected,
        live.contents,
        f"a copy restored to the live store's marker ({origin}; live store at batch "
        f"{meta.batch_id}, restored copy at batch {restored.batch_id})",
        "the live store",
    )


def _restore_to_marker(
    settings: StatekeeperSettings, task: RestoredTask, store: RestoredStore, live: LiveStore
) -> tuple[Contents, str] | str:
    """The store's contents at the live store's marker, rebuilt from the restored snapshot
    (its marker at or below the live one) or the changelog's start, and a description of
    where from; or why that cannot be done."""
    spec, meta = store.spec, live.metadata
    marker = meta.changelog_offset
    if marker is None:
        # The live store never committed: a copy at no marker is empty.
        expected: Contents = {}
        origin = "no commit: empty"
    else:
        topic = changelog_topic(settings.application_id, spec.name)
        tp = (topic, task.partition)
        conf = consumer_config(settings.bootstrap_servers)
        manifest = store.manifest
        if (
            store.snapshot_contents is not None
            and manifest is not None
            and manifest.marker_offset is not None
            and manifest.marker_offset <= marker
        ):
            expected, start = dict(store.snapshot_contents), manifest.marker_offset
            origin = f"snapshot {manifest.snapshot_id} + the changelog to offset {marker}"
        else:
            start = log_start_offsets(conf, [tp], settings.broker_timeout_s)[tp]
            if start > 0 and spec.kind != "window":
                return (
                    f"changelog {topic}[{task.partition}] starts at offset {start}, so no copy "
                    f"can be rebuilt to the live marker at offset {marker} without a snapshot "
                    "at or below it"
                )
            expected = {}
            origin = f"the changelog from offset {start} to offset {marker}"
        reached = _replay(settings, tp, start, marker, expected)
        if reached != marker:
            return (
                f"replaying changelog {topic}[{task.partition}] from offset {start} reached "
                f"no marker at offset {marker} (last marker applied: {reached})"
            )
    observed = live.observed_stream_time
    if spec.kind == "window" and spec.retention_ms and observed is not None and observed >= 0:
        # Windows past retention at the live store's stream time are hidden by the store.
        oldest = observed - spec.retention_ms + 1
        expected = {k: v for k, v in expected.items() if split_changelog_window_key(k)[1] >= oldest}
    return expected, origin


def _replay(
    settings: StatekeeperSettings, tp: tuple[str, int], start: int, marker: int, into: Contents
) -> int | None:
    """Apply to ``into`` what the markers in ``[start, marker]`` of partition ``tp`` commit,
    fenced as every changelog reader does; the offset of the last marker applied."""
    topic, partition = tp
    last: list[int] = []

    def on_commit(
        closed: dict[bytes, bytes | None], _count: int, _marker: CommitMarker, offset: int
    ) -> None:
        for key, value in closed.items():
            if value is None:
                into.pop(key, None)
            else:
                into[key] = value
        last[:] = [offset]

    splitter = CommitSplitter(f"{topic}[{partition}]", on_commit)
    for _, msgs in iter_partition_runs(
        consumer_config(settings.bootstrap_servers),
        [OffsetRange(topic, partition, start, marker + 1)],
        settings.broker_timeout_s,
    ):
        splitter.take(msgs, [m.key() or b"" for m in msgs])
    return last[0] if last else None


def _against_snapshot(
    settings: StatekeeperSettings, task: RestoredTask, store: RestoredStore
) -> CheckResult:
    if not store.spec.logging_enabled:
        return CheckResult(SKIPPED, "logging disabled: nothing restored")
    manifest = store.manifest
    if store.snapshot_contents is None or manifest is None:
        return CheckResult(
            SKIPPED,
            f"app running and the store came from {store.source}, not a snapshot: nothing "
            "independent to compare with here (the truth check still runs)",
        )
    expected = dict(store.snapshot_contents)
    start = (manifest.marker_offset if manifest.marker_offset is not None else -1) + 1
    end = store.metadata.changelog_offset
    tail = 0
    if end is not None and end > start:
        topic = changelog_topic(settings.application_id, store.spec.name)
        records = read_ranges(
            consumer_config(settings.bootstrap_servers),
            [OffsetRange(topic, task.partition, start, end)],
            settings.broker_timeout_s,
        )[tp_key(topic, task.partition)]
        for record in records:
            if record.key is None or record.key.startswith(RESERVED_KEY_PREFIX):
                continue
            tail += 1
            if record.value is None:
                expected.pop(record.key, None)
            else:
                expected[record.key] = record.value
    spec, observed = store.spec, store.observed_stream_time
    if spec.kind == "window" and spec.retention_ms and observed is not None and observed >= 0:
        # Windows past retention are hidden by the store, whether or not their segment is
        # dropped yet: leave them out here too.
        oldest = observed - spec.retention_ms + 1
        expected = {k: v for k, v in expected.items() if split_changelog_window_key(k)[1] >= oldest}
    return _result(
        store,
        expected,
        f"snapshot {manifest.snapshot_id} + {tail} changelog record(s) to the restored marker",
    )


__all__ = ["check_consistency"]
