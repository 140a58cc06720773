"""Every bad input of the ``statekeeper`` command: one line, no traceback, the source named.

Table-driven, in process (``main([...])`` with capsys), no broker: each error is raised before
any connection (bootstrap_servers points at a closed port, and every case must finish in a
few seconds, so a wait for the broker would fail it). Each case runs twice: plain (exit code,
exactly one ``statekeeper: error:`` line on stderr) and with ``--json`` (also exactly one
JSON object ``{"error": ..., "code": ...}`` on stdout).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from statekeeper.app.spec import load_app_spec, spec_json_schema
from statekeeper.app.spec_discovery import find_spec
from statekeeper.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
WORD_COUNT_TOPOLOGY = REPO / "spark_apps" / "word_count" / "topology.py"
CLOSED = "127.0.0.1:1"  # nothing listens: a command that connected would wait, then fail


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def apps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A specs folder ($STATEKEEPER_SPECS_DIR) of good and bad specs, the cwd in tmp_path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STATEKEEPER_SPECS_DIR", str(tmp_path / "specs"))
    for name in list(__import__("os").environ):
        if name.startswith("STATEKEEPER_") and name != "STATEKEEPER_SPECS_DIR":
            monkeypatch.delenv(name)
    good = (
        "application_id: wc\n"
        f"topology: {WORD_COUNT_TOPOLOGY}:build_topology\n"
        "params: {input_topic: lines, output_topic: counts}\n"
        "settings:\n"
        f"  bootstrap_servers: '{CLOSED}'\n"
        "  broker_timeout_s: 15\n"
        "spark:\n"
        "  conf: {spark.sql.shuffle.partitions: 4, spark.ui.enabled: false, "
        "spark.memory.fraction: 0.5}\n"
    )
    _write(tmp_path / "specs" / "wc" / "wc.yaml", good)
    _write(
        tmp_path / "specs" / "typo" / "typo.yaml",
        "application_id: typo\n"
        f"topology: {WORD_COUNT_TOPOLOGY}:build_topology\n"
        "supervision:\n"
        "  check_interval_s: 5\n"
        "  stall_timeout: 300\n",
    )
    _write(
        tmp_path / "specs" / "badvalue" / "badvalue.yaml",
        "application_id: badvalue\n"
        f"topology: {WORD_COUNT_TOPOLOGY}:build_topology\n"
        "settings:\n"
        "  max_records_per_batch: 0\n",
    )
    _write(
        tmp_path / "specs" / "badtoml" / "badtoml.toml",
        'application_id = "badtoml"\n'
        f'topology = "{WORD_COUNT_TOPOLOGY}:build_topology"\n'
        "\n"
        "[settings]\n"
        "restore_thread = 2\n",
    )
    _write(tmp_path / "syntax" / "topo.py", "def build(:\n    pass\n")
    _write(tmp_path / "syntax" / "syntax.yaml", "application_id: syn\ntopology: topo.py:build\n")
    _write(tmp_path / "none" / "topo.py", "def build():\n    topology = object()\n")
    _write(tmp_path / "none" / "none.yaml", "application_id: none\ntopology: topo.py:build\n")
    _write(tmp_path / "nofile" / "nofile.yaml", f"{good}generator: gone.py:main\n")
    _write(tmp_path / "nofunc" / "gen.py", "def produce(argv):\n    return 0\n")
    _write(tmp_path / "nofunc" / "nofunc.yaml", f"{good}drill_model: gen.py:spark_models\n")
    _write(tmp_path / "status.json", "")
    return tmp_path


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    says: list[str]  # substrings of the one error line
    code: int = 2
    env: dict[str, str] = field(default_factory=dict)


WC = "specs/wc/wc.yaml"
CASES = [
    # One dialect: --app everywhere; the old forms name what is wrong in one line.
    Case("app-status-of-a-spec", ["app", "status", WC], ["'wc' has no status file at"]),
    Case("app-status-of-an-app-id", ["app", "status", "--app", "wc"], ["no status file"]),
    Case(
        "app-status-empty-status-file",
        ["app", "status", "status.json"],
        ["cannot read app status from status.json"],
    ),
    Case("app-status-nothing-named", ["app", "status"], ["give the app: --app SPEC"]),
    Case("app-run-without-a-spec", ["app", "run"], ["give the app: --app SPEC"]),
    Case(
        "app-run-spec-named-twice",
        ["app", "run", WC, "--app", WC],
        ["name the app once (--app)"],
    ),
    Case(
        "unknown-app-id",
        ["restore", "--app", "no-such-app"],
        ["restore needs the app spec", "'no-such-app' is not a spec file", "specs"],
    ),
    Case("missing-spec-file", ["stores", "list", "--app", "nowhere.yaml"], ["nowhere.yaml"]),
    # Argument values, checked by the parser.
    Case(
        "stores-inspect-negative-limit",
        ["stores", "inspect", "--app", WC, "--store", "word-counts", "--limit", "-3"],
        ["stores inspect: argument --limit: must be >= 1, got -3"],
    ),
    Case(
        "broker-port-negative",
        ["broker", "start", "--port", "-1"],
        ["argument --port: must be 1-65535 (0: a free port), got -1"],
    ),
    Case(
        "broker-port-too-big",
        ["broker", "start", "--port", "70000"],
        ["argument --port: must be 1-65535 (0: a free port), got 70000"],
    ),
    Case("broker-port-not-a-number", ["broker", "start", "--port", "x"], ["expected an integer"]),
    Case(
        "platform-airflow-port-zero",
        ["platform", "up", "--airflow-port", "0"],
        ["argument --airflow-port: must be 1-65535, got 0"],
    ),
    Case(
        "cluster-no-workers",
        ["cluster", "start", "--workers", "0"],
        ["argument --workers: must be >= 1, got 0"],
    ),
    Case(
        "negative-timeout",
        ["broker", "stop", "--timeout-s", "-5"],
        ["argument --timeout-s: must be >= 0 seconds"],
    ),
    Case("unknown-option", ["snapshot", "list", "--app", WC, "--nope"], ["--nope"]),
    Case("set-without-value", ["spec", "check", "--app", WC, "--set", "novalue"], ["NAME=VALUE"]),
    # The app's generator and drill model, named by its spec.
    Case(
        "generate-without-app",
        ["generate", "--count", "1"],
        ["generate: the following arguments are required: --app"],
    ),
    Case(
        "generate-spec-names-no-generator",
        ["generate", "--app", WC, "--count", "1"],
        ["app 'wc' names no generator: in its spec", "wc.yaml"],
    ),
    Case(
        "drill-spark-spec-names-no-drill-model",
        ["drill", "--app", "wc", "--spark"],
        ["--spark: app 'wc' names no drill_model: in its spec", "wc.yaml"],
    ),
    Case(
        "generator-file-missing",
        ["generate", "--app", "nofile/nofile.yaml"],
        ["generator: no file", "nofile/gone.py", "nofile.yaml:9"],
    ),
    Case(
        "drill-model-function-missing",
        ["drill", "--app", "nofunc/nofunc.yaml", "--spark"],
        ["drill_model:", "nofunc/gen.py defines no function 'spark_models'", "nofunc.yaml:9"],
    ),
    # The topology file.
    Case(
        "topology-syntax-error",
        ["stores", "list", "--app", "syntax/syntax.yaml"],
        ["syntax error at", "topo.py:1", "syntax.yaml:2"],
    ),
    Case(
        "topology-factory-returns-none",
        ["spec", "check", "--app", "none/none.yaml"],
        ["build() returned None, not a Topology (a missing `return`?)", "none.yaml:2"],
    ),
    # Task and store names: checked against the topology before any broker connection.
    Case(
        "restore-unknown-task",
        ["restore", "--app", WC, "--task", "9_9"],
        ["--task 9_9: the topology has no stateful subtopology 9"],
    ),
    Case(
        "restore-unknown-store",
        ["restore", "--app", WC, "--store", "nope"],
        ["--store nope: no such store", "stores: sk-task-state-1, word-counts"],
    ),
    Case(
        "restore-close-store-name",
        ["restore", "--app", WC, "--store", "word-count"],
        ["(did you mean word-counts?)"],
    ),
    Case("restore-bad-task-id", ["restore", "--app", WC, "--task", "x"], ["not <subtopology>_"]),
    Case(
        "snapshot-create-unknown-store",
        ["snapshot", "create", "--app", WC, "--store", "nope"],
        ["--store nope: no such store"],
    ),
    Case(
        "stores-inspect-unknown-store",
        ["stores", "inspect", "--app", WC, "--store", "nope"],
        ["no store 'nope'"],
    ),
    # The spec: validated whole at load, the file and line named.
    Case(
        "supervision-typo",
        ["spec", "check", "--app", "typo"],
        [
            "supervision.stall_timeout: unknown field (did you mean stall_timeout_s",
            "typo.yaml:5",
        ],
    ),
    Case(
        "setting-out-of-range-in-spec",
        ["spec", "check", "--app", "badvalue"],
        ["settings.max_records_per_batch: Input should be greater than or equal to 1", ".yaml:4"],
    ),
    Case(
        "unknown-setting-in-toml-spec",
        ["spec", "check", "--app", "badtoml"],
        ["settings.restore_thread: unknown field (did you mean restore_threads?)", ".toml:5"],
    ),
    # The source of a bad value: the environment, --set, --bootstrap.
    Case(
        "bad-value-from-env",
        ["spec", "check", "--app", WC],
        ["max_records_per_batch", "(got 'lots')", "from env STATEKEEPER_MAX_RECORDS_PER_BATCH"],
        env={"STATEKEEPER_MAX_RECORDS_PER_BATCH": "lots"},
    ),
    Case(
        "bad-value-from-set",
        ["restore", "--app", WC, "--set", "restore_threads=0"],
        [
            "restore_threads: Input should be greater than or equal to 1",
            "from --set restore_threads=0",
        ],
    ),
    Case(
        "unknown-setting-from-set",
        ["stores", "list", "--app", WC, "--set", "state_dri=/tmp"],
        ["state_dri: unknown field (did you mean state_dir?)", "from --set state_dri=/tmp"],
    ),
    Case(
        "bad-bootstrap",
        ["audit", "changelogs", "--app", WC, "--bootstrap", "nohost"],
        ["bootstrap_servers", "expected host:port", "from --bootstrap nohost"],
    ),
    Case(
        "env-broker-port",
        ["broker", "start"],
        ["embedded_broker_port", "from env STATEKEEPER_EMBEDDED_BROKER_PORT"],
        env={"STATEKEEPER_EMBEDDED_BROKER_PORT": "70000"},
    ),
]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, float]:
    started = time.monotonic()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err, time.monotonic() - started


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_naming_its_source(
    case: Case, as_json: bool, apps: Path, capsys, monkeypatch
) -> None:
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    code, out, err, seconds = _run([*case.argv, *(["--json"] if as_json else [])], capsys)
    assert code == case.code, (out, err)
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("statekeeper: error: "), err
    for text in case.says:
        assert text in lines[0], lines[0]
    if as_json:
        document = json.loads(out)  # exactly one JSON object, nothing else
        assert document == {"error": lines[0].removeprefix("statekeeper: error: "), "code": code}
    else:
        assert out == ""
    assert seconds < 5, f"{seconds:.1f} s: waited for something (a broker?) before failing"


def test_empty_results_are_no_error(apps: Path, capsys) -> None:
    url = (apps / "snapshots").as_uri()
    for argv in (
        ["snapshot", "prune", "--app", "wc", "--url", url, "--keep", "1"],
        ["snapshot", "prune", "--app", "never-ran", "--url", url, "--max-age-h", "1"],
        ["snapshot", "list", "--app", WC, "--url", url],
        ["snapshot", "verify", "--app", "never-ran", "--url", url],
    ):
        code, out, err, _ = _run([*argv, "--json"], capsys)
        assert code == 0, err
        payload = json.loads(out)
        assert "no snapshots yet" in payload["note"] and "error" not in payload
    code, out, err, _ = _run(["stores", "list", "--app", "wc", "--json"], capsys)
    assert code == 0 and json.loads(out)["stores"] == []


def test_the_spec_forms_that_are_valid(apps: Path, capsys) -> None:
    """Numbers and booleans in spark.conf are Spark's strings; --app takes a file or an id."""
    spec = load_app_spec(apps / WC)
    assert spec.spark.conf == {
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.memory.fraction": "0.5",
    }
    assert find_spec("wc") == apps / WC
    for app in ("wc", WC):
        code, out, err, _ = _run(["spec", "check", "--app", app, "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["stores"] == ["word-counts"]
    # --set and --bootstrap win over the spec and the environment.
    code, out, err, _ = _run(
        ["spec", "check", "--app", "wc", "--bootstrap", "h:1", "--set", "state_dir=s", "--json"],
        capsys,
    )
    assert code == 0, err
    assert json.loads(out)["bootstrap_servers"] == "h:1" and json.loads(out)["state_dir"] == "s"


def test_old_option_names_still_parse() -> None:
    parser = build_parser()
    assert parser.parse_args(["broker", "stop", "--timeout", "3"]).timeout_s == 3
    assert parser.parse_args(["broker", "stop", "--timeout-s", "4"]).timeout_s == 4
    assert parser.parse_args(["broker", "start"]).timeout_s == 20
    assert parser.parse_args(["platform", "status", "--root", "r"]).run_dir == Path("r")
    assert parser.parse_args(["cluster", "status", "--dir", "c"]).run_dir == Path("c")
    up = parser.parse_args(["platform", "up", "--apps-timeout", "0", "--timeout", "5"])
    assert (up.apps_timeout_s, up.timeout_s) == (0, 5)
    run = parser.parse_args(["app", "run", "x.yaml", "--set", "a=1", "--set", "b=2"])
    assert run.spec_file == "x.yaml" and run.set == ["a=1", "b=2"]
    # Every command that acts on an app takes --app, --set and --bootstrap.
    for command in (
        ["app", "run"],
        ["app", "status"],
        ["audit", "changelogs"],
        ["stores", "list"],
        ["stores", "inspect", "--store", "s"],
        ["snapshot", "create"],
        ["snapshot", "list"],
        ["snapshot", "verify"],
        ["snapshot", "prune"],
        ["restore"],
        ["drill"],
        ["spec", "check"],
        ["generate"],
        ["upgrade", "plan"],
    ):
        args = parser.parse_args([*command, "--app", "a", "--set", "x=1", "--bootstrap", "h:1"])
        assert (args.app, args.set, args.bootstrap) == ("a", ["x=1"], "h:1"), command


def test_spec_schema_validates_every_shipped_spec(capsys) -> None:
    """`statekeeper spec schema` prints the JSON Schema; every spec under spark_apps/
    validates against it (jsonschema when installed, else the model itself)."""
    assert main(["spec", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == spec_json_schema()
    assert {"application_id", "topology", "supervision", "spark"} <= set(schema["properties"])
    assert {"generator", "drill_model"} <= set(schema["properties"])
    assert schema["properties"]["supervision"]["additionalProperties"] is False
    assert "stall_timeout_s" in schema["properties"]["supervision"]["properties"]
    shipped = sorted(p for p in (REPO / "spark_apps").glob("*/*") if p.suffix in (".yaml", ".toml"))
    assert len(shipped) >= 2
    try:
        import jsonschema
    except ImportError:  # not installed: the model is the schema's source
        jsonschema = None
    import tomllib

    import yaml

    for path in shipped:
        load_app_spec(path)
        if jsonschema is not None:
            raw = (
                tomllib.loads(path.read_text())
                if path.suffix == ".toml"
                else yaml.safe_load(path.read_text())
            )
            jsonschema.validate(raw, schema)
    if jsonschema is not None:  # and the schema catches what the loader does
        bad = {"application_id": "x", "topology": "t.py:b", "supervision": {"stall_timeout": 1}}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
        ok = {"application_id": "x", "topology": "t.py:b", "spark": {"conf": {"a": 4}}}
        jsonschema.validate(ok, schema)


def test_a_real_process_prints_one_line() -> None:
    """The console entry point too (python -m statekeeper.cli): no OverflowError traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "broker", "start", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "statekeeper: error: broker start: argument --port: must be 1-65535 (0: a free port), "
        "got 70000 (see `statekeeper broker start --help`)"
    ]
