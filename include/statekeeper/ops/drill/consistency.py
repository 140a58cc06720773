"""Check b: consistency. The restored store against the live one, key by key, at aligned
offsets.

- App stopped (the task lock is free): the live task is opened read-only
  (``StateEnvironment(settings, read_only=True)``: it replays its own changelog tail to the
  last marker, writes nothing to a changelog) and must stand at the same batch and marker as
  the restored copy; then every key must match.
- App running (another process holds the task lock): the live store cannot be opened
  without disturbing the app (asking for the lock makes a parked task let go), so the restored
  store is compared with the snapshot it came from plus the changelog records between the
  snapshot's marker and the restored marker, re-applied here independently of the restorer.
  A store that did not come from a snapshot is then skipped (the truth check still runs).
- No live copy on this machine: skipped.
"""

from __future__ import annotations

from typing import Any

from statekeeper.changelog.records import RESERVED_KEY_PREFIX, changelog_topic
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.ops.drill.contents import Contents, diff_contents, show_key, store_contents
from statekeeper.ops.drill.record import FAIL, PASS, SKIPPED, CheckResult
from statekeeper.ops.drill.sandbox import RestoredStore, RestoredTask
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores.window_bytes import split_changelog_window_key


def _result(store: RestoredStore, expected: Contents, what: str) -> CheckResult:
    diff = diff_contents(expected, store.contents)
    if diff.equal:
        return CheckResult(PASS, f"{len(expected)} keys equal to {what}")
    return CheckResult(
        FAIL,
        diff.describe(what, "the restored copy"),
        [show_key(store.spec, k) for k in diff.examples],
        diff.counts(),
    )


def _holder(directory: TaskDirectory) -> str:
    try:
        return directory.lock_file.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def check_consistency(
    settings: StatekeeperSettings, task: RestoredTask
) -> tuple[str, dict[str, CheckResult]]:
    """Check b for every store of ``task``: (how it ran, result per store)."""
    directory = TaskDirectory(settings.state_dir, settings.application_id, task.task_id)
    if not directory.path.is_dir():
        mode = f"no live copy of task {task.task_id} under {settings.state_dir}"
        return mode, {name: CheckResult(SKIPPED, mode) for name in task.stores}
    if TaskLock(directory, 0).held_elsewhere():
        mode = (
            f"app running (task locked by PID {_holder(directory)}): compared with the "
            "snapshot plus the changelog records up to the restored marker"
        )
        return mode, {
            name: _against_snapshot(settings, task, store) for name, store in task.stores.items()
        }
    missing = [
        s.name
        for s in task.specs
        if s.persistent and s.logging_enabled and not directory.store_path(s.name).is_dir()
    ]
    if missing:
        # Opening would create empty stores in the live directory: never write there.
        mode = f"live copy incomplete (no local {', '.join(missing)}): not opened"
        return mode, {name: CheckResult(SKIPPED, mode) for name in task.stores}
    mode = "app stopped: live task opened read-only and compared key by key"
    return mode, _against_live(settings, task)


def _against_live(settings: StatekeeperSettings, task: RestoredTask) -> dict[str, CheckResult]:
    live_settings = settings.model_copy(update={"lock_timeout_s": 0.0})
    env = StateEnvironment(live_settings, read_only=True, check_broker=False)
    results: dict[str, CheckResult] = {}
    try:
        live = env.task(task.task_id, task.partition, task.specs)
        live.open()
        try:
            for name, store in task.stores.items():
                typed: Any = live.store(name)
                meta = typed.read_metadata()
                if not store.spec.logging_enabled:
                    results[name] = CheckResult(SKIPPED, "logging disabled: nothing restored")
                elif (meta.batch_id, meta.changelog_offset) != (
                    store.metadata.batch_id,
                    store.metadata.changelog_offset,
                ):
                    results[name] = CheckResult(
                        FAIL,
                        f"not aligned: live store at batch {meta.batch_id} (marker offset "
                        f"{meta.changelog_offset}), restored copy at batch "
                        f"{store.metadata.batch_id} (marker offset "
                        f"{store.metadata.changelog_offset})",
                    )
                else:
                    results[name] = _result(
                        store,
                        store_contents(typed),
                        f"the live store (batch {meta.batch_id})",
                    )
        finally:
            live.close()
    finally:
        env.close()
    return results


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
