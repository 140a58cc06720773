"""Check a: integrity. The snapshot a store came from, and the newest snapshot of the store,
re-verify (every file's SHA-256 and size, :func:`statekeeper.snapshots.catalog.verify_snapshot`);
no snapshot was skipped for a damaged one; the manifest's key count is what the installed
checkpoint holds; the store came back at a commit marker, at the same batch as its task's
other stores."""

from __future__ import annotations

from statekeeper.ops.drill.record import FAIL, PASS, SKIPPED, CheckResult
from statekeeper.ops.drill.sandbox import RestoredStore, RestoredTask
from statekeeper.snapshots.catalog import list_snapshots, verify_snapshot
from statekeeper.snapshots.manifest import Manifest
from statekeeper.snapshots.storage import SnapshotStorage


def _bad_files(storage: SnapshotStorage, manifest: Manifest) -> str | None:
    result = verify_snapshot(storage, manifest)
    if result.ok:
        return None
    return ", ".join(f"{b['name']} ({b['problem']})" for b in result.bad)


def check_integrity(
    task: RestoredTask, store: RestoredStore, storage: SnapshotStorage | None
) -> CheckResult:
    """Check a for one restored store (see the module docstring)."""
    spec = store.spec
    if not spec.logging_enabled:
        return CheckResult(SKIPPED, "logging disabled: the store is not restored")
    problems: list[str] = []
    notes: list[str] = []
    for fallback in store.fallbacks:
        problems.append(f"snapshot {fallback['snapshot_id']} was skipped: {fallback['reason']}")
    if store.metadata.changelog_offset is None and store.snapshot_id is None:
        # A task that never committed (e.g. its input partition is still empty).
        return CheckResult(SKIPPED, "no commit marker in the changelog: nothing committed yet")
    batches = {s.metadata.batch_id for s in task.stores.values() if s.spec.logging_enabled}
    if len(batches) > 1:
        problems.append(
            f"the task's stores stopped at different batches {sorted(map(str, batches))} "
            "(a commit's markers only partly written)"
        )
    if storage is not None and spec.persistent:
        manifests = list_snapshots(storage, task.task_id, spec.name)
        if manifests:
            newest = manifests[-1]
            bad = _bad_files(storage, newest)
            if bad:
                problems.append(f"newest snapshot {newest.snapshot_id} fails verification: {bad}")
            else:
                notes.append(f"newest snapshot {newest.snapshot_id} verified")
        used = store.manifest or next(
            (m for m in manifests if m.snapshot_id == store.snapshot_id), None
        )
        newest_id = manifests[-1].snapshot_id if manifests else None
        if used is not None and used.snapshot_id != newest_id:
            bad = _bad_files(storage, used)
            if bad:
                problems.append(f"snapshot {used.snapshot_id} fails verification: {bad}")
            else:
                notes.append(f"restored snapshot {used.snapshot_id} verified")
        if used is not None and store.snapshot_raw_keys is not None:
            if used.key_count != store.snapshot_raw_keys:
                problems.append(
                    f"snapshot {used.snapshot_id}'s manifest counts {used.key_count} keys, its "
                    f"checkpoint holds {store.snapshot_raw_keys}"
                )
            else:
                notes.append(f"manifest key count {used.key_count} matches the checkpoint")
        if not manifests:
            notes.append("no snapshot of this store")
    if problems:
        return CheckResult(FAIL, "; ".join(problems))
    return CheckResult(
        PASS, "; ".join(notes + [f"restored to marker offset {store.metadata.changelog_offset}"])
    )
