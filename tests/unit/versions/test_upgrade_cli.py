"""`statekeeper upgrade plan` in process (``main([...])``): exit codes 0 (compatible), 1 (a
store needs a migration, a source repartitioning), 2 (errors, one line); text and --json.
The broker is a closed port: the command either is told --offline or notes it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from statekeeper.cli import main
from statekeeper.snapshots import Manifest, SnapshotStorage
from statekeeper.snapshots.manifest import new_snapshot_id
from statekeeper.versions import write_recorded

from . import apps
from .apps import APP, Version, fingerprint

CLOSED = "127.0.0.1:1"


@pytest.fixture
def specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Specs of versions of the app (v1, v2 with counts as JSON, v1 again with a node added)
    whose state_dir is tmp_path/state; the cwd is tmp_path."""
    monkeypatch.chdir(tmp_path)
    for name in list(__import__("os").environ):
        if name.startswith("STATEKEEPER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("STATEKEEPER_SPECS_DIR", str(tmp_path / "specs"))
    versions = {"v1": "{}", "v2": "{counts_value_serde: json}", "v1b": "{filter_first: true}"}
    for name, params in versions.items():
        path = tmp_path / "specs" / name / f"{name}.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(
            f"application_id: {APP}\n"
            f"topology: {apps.__file__}:build_version\n"
            f"params: {params}\n"
            "settings:\n"
            f"  bootstrap_servers: '{CLOSED}'\n"
            f"  state_dir: {tmp_path / 'state'}\n"
            f"  snapshot_url: {(tmp_path / 'snaps').as_uri()}\n"
        )
    return tmp_path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _spec(specs: Path, name: str) -> str:
    return str(specs / "specs" / name / f"{name}.yaml")


def test_a_serde_change_needs_a_migration(specs: Path, capsys) -> None:
    write_recorded(specs / "state" / APP, fingerprint(Version()))
    code, out, err = _run(["upgrade", "plan", "--app", _spec(specs, "v2"), "--offline"], capsys)
    assert code == 1 and not err
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in out.splitlines() if line}
    assert rows["counts"] == ["needs-migration", "value serde int -> json"]
    assert rows["per-minute"] == ["unchanged", "unchanged"]
    assert f"state: {specs / 'state' / APP / 'topology.json'}" in out
    assert "note: the broker was not asked" in out
    assert out.rstrip().splitlines()[-2].startswith("incompatible: 1 change(s)")

    code, out, err = _run(
        ["upgrade", "plan", "--app", _spec(specs, "v2"), "--offline", "--json"], capsys
    )
    doc = json.loads(out)
    assert code == 1 and doc["compatible"] is False and doc["application_id"] == APP
    counts = next(s for s in doc["stores"] if s["store"] == "counts")
    assert counts["change"] == "needs-migration"
    assert counts["reason"] == "store counts: value serde int -> json"


def test_an_unrelated_node_is_compatible(specs: Path, capsys) -> None:
    write_recorded(specs / "state" / APP, fingerprint(Version()))
    code, out, _ = _run(["upgrade", "plan", "--app", _spec(specs, "v1b"), "--offline"], capsys)
    assert code == 0
    assert "compatible: the new topology starts on this state" in out


def test_an_unreachable_broker_is_a_note(specs: Path, capsys) -> None:
    write_recorded(specs / "state" / APP, fingerprint(Version()))
    argv = ["upgrade", "plan", "--app", "specs/v1/v1.yaml", "--timeout-s", "0.2", "--json"]
    code, out, err = _run(argv, capsys)
    doc = json.loads(out)
    assert code == 0, err
    assert any("source partition counts not read" in note for note in doc["notes"])


def test_against_a_file_or_a_snapshot(specs: Path, capsys) -> None:
    elsewhere = specs / "old" / "topology.json"
    write_recorded(elsewhere.parent, fingerprint(Version(counts_value_serde="json")))
    argv = ["upgrade", "plan", "--app", "specs/v1/v1.yaml", "--offline", "--json"]
    for against in (elsewhere, elsewhere.parent):
        code, out, _ = _run([*argv, "--against", str(against)], capsys)
        assert code == 1 and json.loads(out)["against"] == str(elsewhere)

    now = datetime.now(UTC)
    manifest = Manifest(
        snapshot_id=new_snapshot_id("1_0", "counts", 3, now),
        app=APP,
        task="1_0",
        store="counts",
        store_kind="rocksdb",
        layout="rocksdb-checkpoint",
        key_serde="str",
        value_serde="int",
        changelog_topic=f"{APP}-counts-changelog",
        changelog_partition=0,
        marker_offset=1,
        source_offsets={},
        batch_id=3,
        key_count=0,
        files=[],
        created_at=now.isoformat(),
        statekeeper_version="0.1.0",
        extra={"topology": fingerprint(Version()).to_dict()},
    )
    SnapshotStorage((specs / "snaps").as_uri(), APP).write_manifest(manifest)
    code, out, _ = _run([*argv, "--from-snapshot", manifest.snapshot_id], capsys)
    assert code == 0 and json.loads(out)["against"] == f"snapshot {manifest.snapshot_id}"
    # With no record in the state root, the newest snapshot's is the default.
    code, out, _ = _run(argv, capsys)
    assert code == 0 and json.loads(out)["against"] == f"snapshot {manifest.snapshot_id}"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ([], "no topology recorded for its state"),
        (["--against", "nowhere"], "--against nowhere: no topology.json there"),
        (["--from-snapshot", "nope"], "no snapshots yet of app 'wc'"),
        (["--against", "x", "--from-snapshot", "y"], "not allowed with argument"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(specs: Path, capsys, extra, says) -> None:
    for as_json in (False, True):
        argv = ["upgrade", "plan", "--app", "specs/v1/v1.yaml", "--offline", *extra]
        code, out, err = _run(argv + (["--json"] if as_json else []), capsys)
        assert code == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("statekeeper: error:")
        assert says in lines[0]
        if as_json:
            assert says in json.loads(out)["error"]


def test_an_unreadable_record_is_an_error(specs: Path, capsys) -> None:
    root = specs / "state" / APP
    root.mkdir(parents=True)
    (root / "topology.json").write_text("{")
    code, _, err = _run(["upgrade", "plan", "--app", "specs/v1/v1.yaml", "--offline"], capsys)
    assert code == 2 and "topology.json is not valid JSON" in err
