"""`statekeeper generate --app ...` (the generator the app's spec names) against the real
(embedded) broker, read back with read_topic."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from spark_apps.patient_monitoring.generator import patient_events
from spark_apps.patient_monitoring.reference import recompute as recompute_patients
from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count.reference import recompute as recompute_word_count
from statekeeper.cli import EXIT_ERROR, EXIT_OK, main
from statekeeper.generate import partition_for_key, place_records
from statekeeper.recompute import read_topic
from statekeeper.testing.app_process import spark_app_spec

START = 1_700_000_000_000


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["generate", *argv, "--json"]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def _same_records(read: dict[int, list[Any]], expected: dict[int, list[Any]]) -> None:
    assert sorted(read) == sorted(expected)
    for partition, records in expected.items():
        got = read[partition]
        assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in got] == [
            (r.offset, r.key, r.value, r.timestamp_ms) for r in records
        ]


def test_generate_word_count_produces_the_promised_records(
    broker: Any, topic_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = broker.bootstrap_servers
    summary = _run(
        capsys,
        "--app",
        "word-count",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic_name,
        "--count",
        "3000",
        "--seed",
        "5",
        "--malformed-share",
        "0.02",
        "--start-ms",
        str(START),
    )
    assert summary["records"] == 3000 and summary["topic_created"] is True
    assert summary["records_per_topic"] == {topic_name: 3000}
    assert summary["malformed"] == 60
    assert summary["malformed_by_kind"] == {"invalid_utf8": 30, "null_value": 30}
    assert summary["first_timestamp_ms"] >= START and summary["span_ms"] > 0

    read = read_topic(bootstrap, topic_name)
    assert {str(p): len(v) for p, v in read.items()} == summary["records_per_partition"]
    expected = place_records(
        word_count_lines(3000, seed=5, malformed_share=0.02, start_ms=START, interval_ms=10),
        topic_name,
        4,
    )
    _same_records(read, expected)
    for partition, records in read.items():
        for record in records:
            if record.key is not None:  # Java-compatible placement
                assert partition_for_key(record.key, 4) == partition
    result = recompute_word_count(read)
    assert len(result.dlq) == 60
    assert result.counts == recompute_word_count(expected).counts


def test_generate_patient_monitoring_produces_the_promised_records(
    broker: Any, topic_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = broker.bootstrap_servers
    summary = _run(
        capsys,
        "--app",
        "patient-monitoring",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic_name,
        "--patients",
        "8",
        "--minutes",
        "4",
        "--seed",
        "9",
        "--malformed-share",
        "0.01",
        "--late-share",
        "0.05",
        "--partitions",
        "3",
        "--start-ms",
        str(START),
    )
    generated = patient_events(8, 4, seed=9, start_ms=START, malformed_share=0.01, late_share=0.05)
    assert summary["records"] == len(generated)
    assert summary["partitions"] == 3
    assert summary["malformed"] == sum(1 for r in generated if r.malformed) > 0
    assert summary["late"] == sum(1 for r in generated if r.late) > 0
    assert summary["seed"] == 9 and summary["start_ms"] == START

    read = read_topic(bootstrap, topic_name)
    _same_records(read, place_records(generated, topic_name, 3))
    result = recompute_patients(read)
    assert len(result.dlq) == summary["malformed"]


def test_generate_refuses_a_topic_with_other_partitions(
    broker: Any, topic_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = broker.bootstrap_servers
    _run(capsys, "--app", "word-count", "--bootstrap", bootstrap, "--topic", topic_name,
         "--count", "10")  # fmt: skip
    code = main(
        ["generate", "--app", "word-count", "--bootstrap", bootstrap, "--topic", topic_name,
         "--count", "10", "--partitions", "2"]
    )  # fmt: skip
    assert code == EXIT_ERROR
    assert "exists with 4 partitions" in capsys.readouterr().err
    # a second run into the same topic appends
    again = _run(
        capsys, "--app", "word-count", "--bootstrap", bootstrap, "--topic", topic_name,
        "--count", "10",
    )  # fmt: skip
    assert again["topic_created"] is False
    assert sum(len(v) for v in read_topic(bootstrap, topic_name).values()) == 20


def test_generate_console_script_prints_a_summary(broker: Any, topic_name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "generate", "--app", "patient-monitoring",
         "--bootstrap", broker.bootstrap_servers, "--topic", topic_name,
         "--patients", "2", "--minutes", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"to {topic_name!r}" in done.stdout
    assert "reproduce with --seed 1 --start-ms" in done.stdout


def test_generate_with_the_spec_file_runs_its_generator(
    broker: Any,
    topic_name: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--app <word_count spec>`: the generator its `generator:` names, found from the spec
    (any working directory, sys.path untouched); the bootstrap servers come from the app's
    settings when --bootstrap is not given."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STATEKEEPER_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    path_before = list(sys.path)
    spec = str(spark_app_spec("word_count"))
    summary = _run(
        capsys, "--app", spec, "--topic", topic_name, "--count", "500", "--seed", "3",
        "--start-ms", str(START), "--no-progress",
    )  # fmt: skip
    assert sys.path == path_before
    assert summary["generator"] == "word-count" and summary["records"] == 500
    read = read_topic(broker.bootstrap_servers, topic_name)
    assert sum(len(v) for v in read.values()) == 500
    expected = place_records(
        word_count_lines(500, seed=3, start_ms=START, interval_ms=10), topic_name, 4
    )
    _same_records(read, expected)


def test_read_topic_of_a_missing_topic_is_a_clear_error(broker: Any, topic_name: str) -> None:
    from statekeeper.errors import ConfigError

    with pytest.raises(ConfigError, match="does not exist"):
        read_topic(broker.bootstrap_servers, topic_name)
