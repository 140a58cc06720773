"""Retention, healing and repair of a snapshot history, as a Hypothesis property (file://).

A history of two stores' snapshots over a small pool of file contents (the empty file and
contents shared between stores included) goes through random steps: new snapshots (the real
upload path, :func:`upload_staged`, from a local staged copy), shared files deleted or
truncated in the storage, manifests truncated, ``verify --repair`` from a random set of local
copies, and prune with random ``keep`` / ``max_age``. After every step:

* prune never makes a kept snapshot worse: every file a remaining manifest references that
  verified before the prune still does, and what an unreadable manifest names stays;
* the newest snapshot that verified before a prune is still listed;
* a new snapshot verifies at once: a shared file it references that was lost or truncated
  is uploaded again (self-healing: one stat per file, so a same-size alteration is left to
  ``verify --repair``), and the older snapshots that need that file verify again too;
* a repair restores exactly the bad files some local copy has; the rest are unrepairable.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.snapshots import (
    SnapshotStorage,
    list_snapshots,
    prune,
    read_catalog,
    repair_snapshots,
    upload_staged,
    verify_snapshot,
)
from statekeeper.snapshots.create import StagedSnapshot
from statekeeper.snapshots.manifest import Manifest, SnapshotFile, new_snapshot_id
from statekeeper.snapshots.staging import StagedStore
from statekeeper.stores.base import StoreMetadata

APP = "prop"
GROUPS = [("0_0", "kv"), ("0_1", "kv")]
POOL = [b"", b"options", b"sst-1" * 40, b"sst-2" * 40, b"sst-3" * 41, b"log"]

STEP = st.one_of(
    st.tuples(
        st.just("snapshot"),
        st.sampled_from(range(len(GROUPS))),
        st.sets(st.sampled_from(range(len(POOL))), min_size=1),
    ),
    st.tuples(st.just("delete"), st.sampled_from(range(len(POOL)))),
    st.tuples(st.just("cut"), st.sampled_from(range(len(POOL)))),
    st.tuples(st.just("truncate"), st.integers(0, 20)),
    st.tuples(st.just("repair"), st.sets(st.sampled_from(range(len(POOL))))),
    st.tuples(
        st.just("prune"),
        st.one_of(st.none(), st.integers(0, 3)),
        st.one_of(st.none(), st.integers(0, 30)),
    ),
)


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


class History:
    """The storage under test plus what the steps did to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.storage = SnapshotStorage((root / "snaps").as_uri(), APP)
        self.step = 0
        # A minute per step, starting after the real clock: prune's "now" is past every
        # shared file's mtime (so no grace protects one) and snapshot ages are in steps.
        self.start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)

    def now(self) -> datetime:
        return self.start + timedelta(minutes=self.step)

    def snapshot(self, group: int, contents: set[int]) -> None:
        task, store = GROUPS[group]
        directory = self.root / "staging" / f"s{self.step}"
        directory.mkdir(parents=True)
        files = []
        for i in sorted(contents):
            (directory / f"f{i}").write_bytes(POOL[i])
            files.append(SnapshotFile(f"f{i}", _sha(POOL[i]), len(POOL[i])))
        created = self.now()
        manifest = Manifest(
            snapshot_id=new_snapshot_id(task, store, self.step, created),
            app=APP,
            task=task,
            store=store,
            store_kind="rocksdb",
            layout="rocksdb-checkpoint",
            key_serde="str",
            value_serde="str",
            changelog_topic=None,
            changelog_partition=int(task[-1]),
            marker_offset=self.step,
            source_offsets={},
            batch_id=self.step,
            key_count=len(files),
            files=files,
            created_at=created.isoformat(),
            statekeeper_version="test",
        )
        staged = StagedStore(
            directory, "rocksdb-checkpoint", files, len(files), StoreMetadata(), 0.0
        )
        result = upload_staged(StagedSnapshot(manifest, staged), self.storage)
        # Self-healing: the new snapshot verifies whatever was lost before.
        assert verify_snapshot(self.storage, result.manifest).ok
        healed = {f.sha256 for f in files}
        for other in list_snapshots(self.storage):
            bad = {b["sha256"] for b in verify_snapshot(self.storage, other).bad}
            assert not bad & healed

    def delete(self, i: int) -> None:
        Path(self.storage.shared_path(_sha(POOL[i]))).unlink(missing_ok=True)

    def cut(self, i: int) -> None:
        path = Path(self.storage.shared_path(_sha(POOL[i])))
        if path.exists():
            path.write_bytes(POOL[i][: len(POOL[i]) // 2] if POOL[i] else b"x")

    def truncate(self, k: int) -> None:
        paths = self.storage.manifest_paths()
        if paths:
            path = Path(paths[k % len(paths)])
            path.write_text(path.read_text()[: len(path.read_text()) // 2])

    def repair(self, local: set[int]) -> None:
        state = self.root / "state" / f"r{self.step}"
        state.mkdir(parents=True)
        for i in local:
            (state / f"copy{i}").write_bytes(POOL[i])
        results = [verify_snapshot(self.storage, m) for m in list_snapshots(self.storage)]
        report = repair_snapshots(self.storage, results, [state])
        have = {_sha(POOL[i]) for i in local}
        assert {f["sha256"] for f in report.repaired} <= have
        assert not {f["sha256"] for f in report.unrepairable} & have
        for result in report.results:
            assert {b["sha256"] for b in result.bad}.isdisjoint(have)

    def prune(self, keep: int | None, max_age_min: int | None) -> None:
        before = read_catalog(self.storage)
        good_before = {m.snapshot_id: _good_files(self.storage, m) for m in before.manifests}
        newest_verified = {}
        for m in before.manifests:  # oldest first: the last verified one per group wins
            if len(good_before[m.snapshot_id]) == len({f.sha256 for f in m.files if f.stored}):
                newest_verified[(m.task, m.store)] = m.snapshot_id
        named = set()
        for bad in before.unreadable:
            named |= bad.referenced() or set()
        present = {sha for sha in named if self.storage.has_shared(sha)}
        max_age = None if max_age_min is None else timedelta(minutes=max_age_min)
        report = prune(
            self.storage,
            keep=keep,
            max_age=max_age,
            grace=timedelta(0),
            now=self.now(),
        )
        after = read_catalog(self.storage)
        listed = {m.snapshot_id for m in after.manifests}
        assert set(report.kept) == listed
        assert set(newest_verified.values()) <= listed
        for m in after.manifests:  # never worse than before the prune
            assert good_before[m.snapshot_id] <= _good_files(self.storage, m)
        assert all(self.storage.has_shared(sha) for sha in present)
        assert {u.path for u in after.unreadable} == {u.path for u in before.unreadable}


def _good_files(storage: SnapshotStorage, manifest: Manifest) -> set[str]:
    bad = {b["sha256"] for b in verify_snapshot(storage, manifest).bad}
    return {f.sha256 for f in manifest.files if f.stored and f.sha256 not in bad}


PROPERTY = settings(
    max_examples=int(os.environ.get("STATEKEEPER_SNAPSHOT_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY
@given(steps=st.lists(STEP, min_size=1, max_size=14))
def test_prune_heal_and_repair_never_break_a_kept_snapshot(steps) -> None:
    with tempfile.TemporaryDirectory() as temp:
        history = History(Path(temp))
        for step in steps:
            history.step += 1
            getattr(history, step[0])(*step[1:])
