"""The topology fingerprint: what it records, its JSON round trip, its digest, and the copy
in the state root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper.stores.serdes import JsonSerde, serde_name
from statekeeper.versions import (
    FingerprintError,
    TopologyFingerprint,
    WindowFingerprint,
    read_recorded,
    write_recorded,
)
from statekeeper.versions.recorded import recorded_path

from .apps import Version, fingerprint


def test_it_records_stores_subtopologies_and_topics() -> None:
    fp = fingerprint(Version(), partitions=4)
    assert [s.name for s in fp.stores] == ["counts", "per-minute", "sk-task-state-1"]
    counts = fp.store("counts")
    assert counts is not None
    assert (counts.kind, counts.key_serde, counts.value_serde) == ("rocksdb", "str", "int")
    assert (counts.logging, counts.changelog_topic, counts.subtopology) == (
        True,
        "wc-counts-changelog",
        1,
    )
    window = fp.store("per-minute")
    assert window is not None and window.window == WindowFingerprint(60_000, 0, 120_000)
    assert fp.store("sk-task-state-1").internal  # type: ignore[union-attr]
    assert [(s.id, s.source_topics) for s in fp.subtopologies] == [
        (0, ("lines",)),
        (1, ("wc-words-repartition",)),
    ]
    assert fp.source_topics == ("lines",)
    assert fp.repartition_topics == ("wc-words-repartition",)
    assert fp.source_partitions == {"lines": 4}  # counts of other topics are dropped


def test_json_round_trip_and_a_stable_digest() -> None:
    fp = fingerprint(Version(), partitions=6)
    text = fp.to_json()
    assert TopologyFingerprint.from_json(text) == fp
    assert json.loads(text)["digest"] == fp.digest
    # Deterministic: another build of the same version gives the same bytes.
    assert fingerprint(Version(), partitions=6).to_json() == text
    # Partition counts are recorded but not digested; any change of a store is.
    assert fingerprint(Version(), partitions=4).digest == fp.digest
    assert fingerprint(Version(counts_value_serde="json")).digest != fp.digest


def test_unknown_fields_are_ignored_and_missing_ones_named() -> None:
    raw = json.loads(fingerprint(Version()).to_json())
    raw["recorded_by"] = "a newer statekeeper"
    raw["stores"][0]["compression"] = "zstd"
    assert TopologyFingerprint.from_dict(raw) == fingerprint(Version())
    del raw["stores"][0]["kind"]
    with pytest.raises(FingerprintError, match="somewhere.json cannot be read.*kind"):
        TopologyFingerprint.from_dict(raw, "somewhere.json")
    with pytest.raises(FingerprintError, match="not valid JSON"):
        TopologyFingerprint.from_json("{", "x")


def test_serde_objects_have_stable_names() -> None:
    class Msgpack:
        name = "msgpack"

    class Unnamed:
        pass

    assert serde_name("json") == "json"
    assert serde_name(JsonSerde()) == "json"
    assert serde_name(Msgpack()) == "msgpack"  # type: ignore[arg-type]
    unnamed = serde_name(Unnamed())  # type: ignore[arg-type]
    assert unnamed.endswith(".test_serde_objects_have_stable_names.<locals>.Unnamed")


def test_the_state_root_copy(tmp_path: Path) -> None:
    root = tmp_path / "state" / "wc"
    assert read_recorded(root) is None
    fp = fingerprint(Version())
    path = write_recorded(root, fp)
    assert path == recorded_path(root) == root / "topology.json"
    assert read_recorded(root) == fp
    assert [p.name for p in root.iterdir()] == ["topology.json"]  # no temp file left
    path.write_text("[1, 2]")
    with pytest.raises(FingerprintError, match="topology.json"):
        read_recorded(root)
