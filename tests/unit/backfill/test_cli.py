"""``statekeeper backfill``'s bad input: one line, exit code 2, before any broker connection
(bootstrap_servers points at a closed port)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from statekeeper.cli import build_parser, main

REPO = Path(__file__).resolve().parents[3]
TOPOLOGY = REPO / "spark_apps" / "word_count" / "topology.py"


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("STATEKEEPER_"):
            monkeypatch.delenv(name)
    path = tmp_path / "wc.yaml"
    path.write_text(
        "application_id: wc\n"
        f"topology: {TOPOLOGY}:build_topology\n"
        "params: {input_topic: lines, output_topic: counts}\n"
        "settings: {bootstrap_servers: '127.0.0.1:1', broker_timeout_s: 15}\n"
    )
    return path


CASES = [
    (["--from", "yesterday"], "--from: expected 'earliest' or a timestamp in epoch milliseconds"),
    (["--from", "-1"], "--from: a timestamp must be >= 0 ms"),
    (["--until", "{oops"], "--until: expected 'now' or JSON like"),
    (["--until", '{"clicks": {"0": 5}}'], "--until: topic 'clicks' is not a source of the app"),
    (["--until", '{"lines": {"0": "x"}}'], "--until: offset of lines[0] must be an integer >= 0"),
    (["--store", "word-counts"], "store word-counts is in subtopology 1, which reads repartition"),
    (["--store", "nope"], "the topology has no store 'nope'"),
    (["--store", "word-counts", "--until", "now"], "--from and --until do not apply"),
    (["--max-records-per-batch", "0"], "argument --max-records-per-batch: must be >= 1"),
    (["--local"], "backfill --local: only with --input"),
    (["--input", "x.parquet", "--store", "word-counts"], "--store, --from and --until do not"),
    (["--input", "x.parquet", "--max-records-per-batch", "9"], "does not apply"),
    (["--input", "missing.parquet", "--local"], "--input missing.parquet: no such file"),
]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(("argv", "says"), CASES, ids=[c[1][:40] for c in CASES])
def test_bad_input_is_one_line(spec: Path, argv: list, says: str, as_json: bool, capsys) -> None:
    started = time.monotonic()
    code = main(["backfill", "--app", str(spec), *argv, *(["--json"] if as_json else [])])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("statekeeper: error: "), err
    assert says in lines[0] and "Traceback" not in out + err
    if as_json:
        assert json.loads(out) == {
            "error": lines[0].removeprefix("statekeeper: error: "),
            "code": 2,
        }
    else:
        assert out == ""
    assert time.monotonic() - started < 5, "waited for something (a broker?) before failing"


def test_the_command_takes_the_app_options_and_its_own() -> None:
    args = build_parser().parse_args(
        ["backfill", "--app", "a", "--set", "x=1", "--bootstrap", "h:1", "--no-snapshot"]
    )
    assert (args.app, args.set, args.bootstrap) == ("a", ["x=1"], "h:1")
    assert args.snapshot is False and args.from_ is None and args.until is None
    args = build_parser().parse_args(["backfill", "--app", "a", "--from", "5", "--until", "now"])
    assert args.snapshot is True and (args.from_, args.until) == ("5", "now")
