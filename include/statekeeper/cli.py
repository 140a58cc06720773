"""The ``statekeeper`` command.

One ``_cmd_*`` function per subcommand, registered in :func:`build_parser`; each returns an
exit code. Heavy modules are imported inside the functions so ``statekeeper --help`` and
Airflow tasks that shell out stay fast. Errors from :mod:`statekeeper.errors` and bad
arguments print one line to stderr and exit 2 (with ``--json``, also one JSON object
``{"error": ..., "code": 2}`` on stdout); every subcommand takes ``--json`` for
machine-readable output.

Every command that acts on an app takes the same options: ``--app SPEC`` (a spec file, or
an application id found in ``$STATEKEEPER_SPECS_DIR``), ``--set NAME=VALUE`` (repeatable)
and ``--bootstrap`` (the ``bootstrap_servers`` setting); see :func:`_app_options`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from statekeeper import __version__
from statekeeper.errors import StatekeeperError

SPECS_DIR_ENV = "STATEKEEPER_SPECS_DIR"  # statekeeper.app.spec.SPECS_DIR_ENV (not imported: fast)

EXIT_OK = 0
EXIT_ERROR = 2  # a StatekeeperError: bad config, broker unreachable, ...
EXIT_NOT_RUNNING = 3  # `broker status` when no broker runs (LSB convention)

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A bad command line (argparse's errors, as one line)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), raised to :func:`main`."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        command = self.prog.removeprefix("statekeeper").strip()
        raise UsageError(
            f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``statekeeper`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _fail(str(exc), EXIT_ERROR, as_json="--json" in argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        # A command group given without its subcommand (e.g. `statekeeper broker`).
        args.parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return handler(args)
    except (StatekeeperError, UsageError) as exc:
        return _fail(str(exc), EXIT_ERROR, as_json=getattr(args, "json", False))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `statekeeper ... | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _fail(message: str, code: int, *, as_json: bool) -> int:
    """Report an error as one line, ``statekeeper: error: ...`` on stderr; with ``--json``
    also as one JSON object ``{"error": ..., "code": ...}`` on stdout. Returns ``code``."""
    line = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    if as_json:
        print(json.dumps({"error": line, "code": code}), flush=True)
    print(f"statekeeper: error: {line}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser; add a subcommand with a ``_add_*`` function below."""
    parser = _Parser(
        prog="statekeeper",
        description="Kafka-Streams-grade state stores for PySpark, operated from Airflow.",
    )
    parser.add_argument("--version", action="version", version=f"statekeeper {__version__}")
    parser.set_defaults(parser=parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_broker(commands)
    _add_app(commands)
    _add_generate(commands)
    _add_demo(commands)
    _add_audit(commands)
    _add_stores(commands)
    _add_snapshot(commands)
    _add_restore(commands)
    _add_drill(commands)
    _add_platform(commands)
    _add_cluster(commands)
    _add_spec(commands)
    return parser


def _subcommand(
    group: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    handler: Handler | None = None,
) -> argparse.ArgumentParser:
    sub = group.add_parser(name, help=help_text, description=help_text)
    sub.set_defaults(parser=sub)
    if handler is not None:
        sub.set_defaults(handler=handler)
        sub.add_argument("--json", action="store_true", help="print machine-readable JSON")
    return sub


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    print(json.dumps(payload, sort_keys=True, default=str) if args.json else text)


# --- argument types and the options every app command shares ------------------------------


def _int_in(low: int, high: int | None = None, *, zero: str | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``low..high`` (``zero``: what 0 means, when allowed)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value == 0 and zero is not None:
            return value
        if value < low or (high is not None and value > high):
            span = f"{low}-{high}" if high is not None else f">= {low}"
            extra = f" (0: {zero})" if zero is not None else ""
            raise argparse.ArgumentTypeError(f"must be {span}{extra}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    """An argparse type: a duration in seconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    return value


PORT = _int_in(1, 65535)
PORT_OR_FREE = _int_in(1, 65535, zero="a free port")


def _timeout_option(parser: argparse.ArgumentParser, default: float, help_text: str) -> None:
    """``--timeout-s`` (and ``--timeout``, its old name, hidden)."""
    parser.add_argument(
        "--timeout-s", type=_seconds, default=default, help=f"{help_text} ({default:g})"
    )
    parser.add_argument("--timeout", dest="timeout_s", type=_seconds, help=argparse.SUPPRESS)


def _run_dir_option(
    parser: argparse.ArgumentParser, default: Path | None, help_text: str, *old: str
) -> None:
    """``--run-dir``: where a background service keeps pid files, logs and its state file
    (its old names ``old`` stay as hidden aliases)."""
    parser.add_argument("--run-dir", type=Path, default=default, help=help_text)
    for name in old:
        parser.add_argument(name, dest="run_dir", type=Path, help=argparse.SUPPRESS)


def _app_options(
    parser: argparse.ArgumentParser, *, required: bool = True, app_help: str | None = None
) -> None:
    """``--app``, ``--set`` and ``--bootstrap``: what every command acting on an app takes."""
    parser.add_argument(
        "--app",
        required=required,
        metavar="SPEC",
        help=app_help
        or "the app: its spec file (.yaml/.toml) or its application id, found in "
        f"${SPECS_DIR_ENV} (default: the repo's spark_apps/)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a setting (repeatable; values parsed as JSON when they can be), e.g. "
        "--set max_records_per_batch=50000; wins over the spec and STATEKEEPER_* env vars",
    )
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT[,...]",
        help="Kafka bootstrap servers (overrides the bootstrap_servers setting)",
    )


def _overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings the command line overrides, and the option each came from."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for pair in getattr(args, "set", None) or []:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--set expects NAME=VALUE, got {pair!r}")
        try:
            values[name] = json.loads(text)
        except ValueError:
            values[name] = text
        sources[name] = f"from --set {pair}"
    flags = {
        "bootstrap_servers": ("bootstrap", "--bootstrap"),
        "state_dir": ("state_dir", "--state-dir"),
        "snapshot_url": ("url", "--url"),
    }
    for field, (dest, flag) in flags.items():
        value = getattr(args, dest, None)
        if value is not None:
            values[field] = Path(value) if field == "state_dir" else value
            sources[field] = f"from {flag} {value}"
    return values, sources


def _app_target(args: argparse.Namespace, need_spec: str | None = None) -> tuple[Any, Any]:
    """(settings, app spec) of ``--app``: a spec file, or an application id whose spec is in
    the specs folder; without a spec (None) only if the command (``need_spec`` names it)
    can act on a bare application id. Settings: defaults < spec < env < the command line."""
    from statekeeper.app.spec import find_spec, load_app_spec, specs_dir
    from statekeeper.errors import ConfigError
    from statekeeper.settings import settings_from

    values, sources = _overrides(args)

    def source_of(field: str) -> tuple[str, str] | None:
        return (field, sources[field]) if field in sources else None

    path = find_spec(args.app)
    if path is None:
        if need_spec is not None:
            raise ConfigError(
                f"{need_spec} needs the app spec: {args.app!r} is not a spec file, and no "
                f"spec in {specs_dir()} (${SPECS_DIR_ENV}) has that application_id"
            )
        return settings_from({"application_id": args.app, **values}, source_of), None
    spec = load_app_spec(path)
    return spec.settings_with(values, source_of), spec


def _check_selection(args: argparse.Namespace, topology: Any) -> None:
    """``--task``/``--store`` name tasks and stores of the topology (before any broker)."""
    from statekeeper.ops.restore import check_selection

    check_selection(topology, getattr(args, "task", None), getattr(args, "store", None))


# --- broker -------------------------------------------------------------------------------


def _add_broker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = _subcommand(commands, "broker", "run the embedded Kafka-compatible broker (Tansu)")
    actions = broker.add_subparsers(title="actions", metavar="ACTION")

    def run_dir_arg(sub: argparse.ArgumentParser) -> None:
        _run_dir_option(
            sub,
            None,
            "pid files, logs and broker.json (default: STATEKEEPER_EMBEDDED_BROKER_DIR "
            "or var/broker)",
        )

    start = _subcommand(
        actions, "start", "start the broker on 127.0.0.1 in the background", _cmd_broker_start
    )
    start.add_argument(
        "--port",
        type=PORT_OR_FREE,
        help="Kafka port; --port 0 picks a free port (default: STATEKEEPER_EMBEDDED_BROKER_PORT, "
        "which must be 1-65535, else 9092)",
    )
    start.add_argument(
        "--data-dir",
        type=Path,
        help="keep topics on disk here (S3 storage via localbucket; statekeeper's own reads are "
        "not reliable on it yet, see docs/brokers.md); default: in memory",
    )
    _timeout_option(start, 20.0, "start-up timeout, seconds")
    run_dir_arg(start)

    stop = _subcommand(actions, "stop", "stop the broker recorded in the run dir", _cmd_broker_stop)
    _timeout_option(stop, 10.0, "seconds before SIGKILL")
    run_dir_arg(stop)

    status = _subcommand(
        actions,
        "status",
        "show the broker's state (exit code 3 when not running)",
        _cmd_broker_status,
    )
    run_dir_arg(status)


def _broker_run_dir(args: argparse.Namespace) -> Path:
    if args.run_dir is not None:
        return Path(args.run_dir)
    from statekeeper.settings import load_settings

    return load_settings().embedded_broker_dir


def _cmd_broker_start(args: argparse.Namespace) -> int:
    from statekeeper.kafka.embedded import EmbeddedBroker

    port = args.port
    if port is None:
        from statekeeper.settings import load_settings

        port = load_settings().embedded_broker_port
    broker = EmbeddedBroker(
        port or None,
        data_dir=args.data_dir,
        run_dir=_broker_run_dir(args),
        startup_timeout_s=args.timeout_s,
        detach=True,
    ).start()
    state = broker.state
    assert state is not None
    storage = f"on disk in {state.data_dir}" if state.data_dir else "in memory"
    _emit(
        args,
        {"running": True, **vars(state)},
        f"broker running on {state.bootstrap_servers} (pid {state.tansu_pid}, data {storage}); "
        f"run dir {state.run_dir}",
    )
    return EXIT_OK


def _cmd_broker_stop(args: argparse.Namespace) -> int:
    from statekeeper.kafka.embedded import stop_broker

    result = stop_broker(_broker_run_dir(args), timeout_s=args.timeout_s)
    if result["was_running"]:
        text = f"broker on {result['bootstrap_servers']} stopped"
    else:
        text = f"no broker running (run dir {result['run_dir']})"
    _emit(args, result, text)
    return EXIT_OK


def _cmd_broker_status(args: argparse.Namespace) -> int:
    from statekeeper.kafka.embedded import broker_status

    status = broker_status(_broker_run_dir(args))
    if status["running"]:
        storage = f"on disk in {status['data_dir']}" if status["data_dir"] else "in memory"
        text = (
            f"broker running on {status['bootstrap_servers']} (pid {status['tansu_pid']}, "
            f"data {storage}, up {status['uptime_s']:.0f}s)"
        )
    elif "port" in status:
        text = (
            f"broker recorded on {status['bootstrap_servers']} is not running "
            f"(tansu alive: {status['tansu_alive']}, s3 alive: {status['s3_alive']}); "
            "`statekeeper broker stop` cleans up"
        )
    else:
        text = f"no broker running (run dir {status['run_dir']})"
    _emit(args, status, text)
    return EXIT_OK if status["running"] else EXIT_NOT_RUNNING


# --- generate and demo: tools of the shipped apps in ./spark_apps -------------------------


def _shipped_app_module(app: str, module: str) -> Any:
    """Import ``spark_apps.<app>.<module>`` from the current directory (a checkout)."""
    import importlib

    folder = app.replace("-", "_")
    root = Path.cwd()
    if not (root / "spark_apps" / folder / f"{module}.py").is_file():
        raise StatekeeperError(
            f"no spark_apps/{folder}/{module}.py under {root}: run this from the statekeeper "
            "repository, where the shipped apps live"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # the app's modules import each other as spark_apps.*
    return importlib.import_module(f"spark_apps.{folder}.{module}")


def _add_generate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    generate = _subcommand(
        commands,
        "generate",
        "produce seed-deterministic input for a shipped app (spark_apps/APP/generator.py)",
        _cmd_generate,
    )
    generate.add_argument(
        "app", metavar="APP", help="word-count or patient-monitoring (a folder of spark_apps/)"
    )
    generate.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        metavar="...",
        help="the generator's options (`statekeeper generate APP --help` lists them)",
    )


def _cmd_generate(args: argparse.Namespace) -> int:
    options = list(args.options) + (["--json"] if args.json else [])
    return int(_shipped_app_module(args.app, "generator").main(options))


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = _subcommand(
        commands,
        "demo",
        "patient_monitoring on Spark end to end: kill -9, lost task state, exact recovery "
        "(spark_apps/patient_monitoring/demo.py)",
        _cmd_demo,
    )
    # Passed on to the demo, which checks them and knows the defaults.
    demo.add_argument("--patients", help="patients to simulate (default: 40)")
    demo.add_argument("--minutes", help="event-time span, minutes (default: 30)")
    demo.add_argument("--seed", help="random seed (default: 7)")


def _cmd_demo(args: argparse.Namespace) -> int:
    options = [
        f"--{name}={value}"
        for name in ("patients", "minutes", "seed")
        if (value := getattr(args, name)) is not None
    ]
    return int(_shipped_app_module("patient_monitoring", "demo").main(options))


# --- app ----------------------------------------------------------------------------------


def _add_app(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    app = _subcommand(commands, "app", "run stateful apps on Spark and read their status")
    sub = app.add_subparsers(title="app commands", metavar="ACTION")
    run = _subcommand(sub, "run", "run an app from its spec on Spark (blocks)", _cmd_app_run)
    _app_options(run, required=False)
    run.add_argument("spec_file", nargs="?", metavar="SPEC", help=argparse.SUPPRESS)
    run.add_argument("--spec", dest="spec_option", help=argparse.SUPPRESS)  # the old name
    run.add_argument(
        "--stop-when-idle",
        action="store_true",
        help="stop gracefully once all input is processed (batch-style runs, tests)",
    )
    status = _subcommand(
        sub,
        "status",
        "print an app's status: from its running status endpoint, else its status file "
        "(exit code 2 when the app is in ERROR)",
        _cmd_app_status,
    )
    _app_options(status, required=False)
    status.add_argument(
        "target",
        nargs="?",
        metavar="STATUS",
        help="instead of --app: a status file or an http://127.0.0.1:PORT/status URL",
    )


def _one_app(args: argparse.Namespace, *given: str | None) -> None:
    """Set ``args.app`` from ``--app`` or the one other form of naming it in ``given``."""
    from statekeeper.errors import ConfigError

    named = [value for value in (args.app, *given) if value]
    if len(named) > 1:
        raise ConfigError(f"name the app once (--app), got {named}")
    if not named:
        raise ConfigError("give the app: --app SPEC (a spec file or an application id)")
    args.app = named[0]


def _cmd_app_run(args: argparse.Namespace) -> int:
    from statekeeper.app.launcher import configure_logging, run_app

    _one_app(args, args.spec_file, args.spec_option)
    settings, spec = _app_target(args, need_spec="app run")  # every check before Spark starts
    configure_logging()
    status = run_app(spec, settings=settings, stop_when_idle=args.stop_when_idle)
    _emit(args, status, f"{status['application_id']}: {status['state']} {status.get('totals')}")
    return EXIT_OK


def _cmd_app_status(args: argparse.Namespace) -> int:
    import urllib.request

    from statekeeper.errors import ConfigError

    target: str | None = args.target
    if target and (
        target.startswith(("http://", "https://"))
        or (Path(target).is_file() and Path(target).suffix not in (".yaml", ".yml", ".toml"))
    ):
        if args.app:
            raise ConfigError(f"give --app or a status file/URL, not both ({target})")
        source = target
    else:
        from statekeeper.ops.snapshot_app import running_app_status_url

        _one_app(args, target)
        settings, _ = _app_target(args, need_spec="app status")
        source = running_app_status_url(settings) or str(settings.status_path())
        if not source.startswith("http") and not Path(source).is_file():
            raise ConfigError(
                f"app {settings.application_id!r} has no status file at {source}: it has "
                "not run with this state_dir (set state_dir or status_file to where it ran)"
            )
    try:
        if source.startswith(("http://", "https://")):
            with urllib.request.urlopen(source, timeout=10) as resp:
                status = json.load(resp)
        else:
            status = json.loads(Path(source).read_text())
    except (OSError, ValueError) as exc:
        raise StatekeeperError(f"cannot read app status from {source}: {exc}") from exc
    if not isinstance(status, dict):
        raise StatekeeperError(f"{source} is not an app status document")
    last = status.get("last_batch") or {}
    text = (
        f"{status.get('application_id')}: {status.get('state')}; last batch "
        f"{last.get('batch_id', '-')} ({last.get('records', 0)} records); "
        f"tasks {len(status.get('tasks', {}))}"
    )
    _emit(args, status, text)
    return EXIT_OK if status.get("state") not in ("ERROR",) else EXIT_ERROR


# --- audit --------------------------------------------------------------------------------

EXIT_AUDIT_FAILED = 1  # `audit changelogs`: at least one topic failed


def _add_audit(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = _subcommand(commands, "audit", "check an app's topics against what it needs")
    sub = audit.add_subparsers(title="audits", metavar="AUDIT")
    changelogs = _subcommand(
        sub,
        "changelogs",
        "audit every changelog topic of an app: configs, contents, restore forecast "
        "(exit code 1 when a topic fails)",
        _cmd_audit_changelogs,
    )
    _app_options(changelogs)
    changelogs.add_argument(
        "--fix",
        action="store_true",
        help="set cleanup.policy and retention.ms where they are wrong (and, where the broker "
        "compacts, the cleaner's dirty ratio, segment.ms and min.compaction.lag.ms), then "
        "audit again",
    )
    changelogs.add_argument(
        "--restore-rate",
        type=float,
        help="records/s for the restore forecast (default: the rate of the app's own "
        "restores in its status file, else 550000, measured on the embedded broker)",
    )
    changelogs.add_argument(
        "--no-measure", action="store_true", help="check configs only; do not read the topics"
    )
    changelogs.add_argument(
        "--spark",
        action="store_true",
        help="measure contents with a Spark batch read (statekeeper_kafka source, local[2] "
        "unless a session is active) instead of the plain read",
    )
    changelogs.add_argument(
        "--trim",
        action="store_true",
        help="delete changelog records below the oldest kept snapshot's marker (DeleteRecords; "
        "refused on brokers without it, such as the embedded one)",
    )
    changelogs.add_argument(
        "--restore-time-budget",
        type=float,
        metavar="SECONDS",
        help="compare the app's forecast restore time (newest snapshot + tail, summed over "
        "its changelogs) with this (default: the settings' restore_time_budget_s)",
    )
    changelogs.add_argument(
        "--snapshot-over-budget",
        action="store_true",
        help="snapshot the app (running: through its status endpoint; stopped: from its "
        "local state) when its forecast restore time exceeds the budget",
    )


def _cmd_audit_changelogs(args: argparse.Namespace) -> int:
    from statekeeper.ops.audit.changelog_audit import audit_changelogs
    from statekeeper.ops.audit.forecast import choose_restore_rate
    from statekeeper.ops.audit.history import AuditHistory
    from statekeeper.snapshots.manifest import SnapshotError

    settings, spec = _app_target(args, need_spec="audit changelogs")
    budget = _budget_of(args, settings)
    status_file = settings.status_path()
    try:
        storage, snapshots_note = _snapshot_storage(settings), None
    except SnapshotError as exc:  # no snapshots yet: forecast full replays, and say why
        storage, snapshots_note = None, str(exc)
    measurer, session = None, None
    if args.spark and not args.no_measure:
        from statekeeper.ops.audit.spark_contents import measure_changelog_spark, spark_session

        spark, made_here = spark_session(settings.spark_master)
        session = spark if made_here else None

        def measurer(bootstrap: str, topic: str, partitions: int) -> Any:
            return measure_changelog_spark(
                spark, bootstrap, topic, timeout_s=settings.broker_timeout_s
            )

    try:
        report = audit_changelogs(
            spec.build_topology(),
            settings.application_id,
            settings.bootstrap_servers,
            fix=args.fix,
            measure=not args.no_measure,
            restore_rate=choose_restore_rate(args.restore_rate, status_file),
            timeout_s=settings.broker_timeout_s,
            measurer=measurer,
            snapshots=storage,
            snapshots_note=snapshots_note,
            trim=args.trim,
        )
    finally:
        if session is not None:
            session.stop()
    AuditHistory.under(settings.state_dir).append(report.to_dict())  # the State stores page
    budget = _restore_budget(args, budget, settings, spec, report)
    payload = {**report.to_dict(), "restore_budget": budget.to_dict() if budget else None}
    lines = _audit_lines(report)
    if budget is not None:
        lines.append(
            f"  restore forecast {budget.forecast_restore_s:.3g}s vs budget {budget.budget_s}s: "
            + (f"over, snapshot {budget.snapshot}" if budget.over_budget else "within")
        )
    _emit(args, payload, "\n".join(lines))
    if report.trim is not None and report.trim.refused is not None:
        print(f"statekeeper: --trim refused: {report.trim.refused}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_AUDIT_FAILED if report.verdict == "fail" else EXIT_OK


def _budget_of(args: argparse.Namespace, settings: Any) -> float | None:
    """The restore time budget: ``--restore-time-budget``, else the settings'."""
    from statekeeper.errors import ConfigError

    budget = args.restore_time_budget
    if budget is None:
        budget = settings.restore_time_budget_s
    elif budget <= 0:
        raise ConfigError(f"--restore-time-budget must be > 0 seconds, got {budget}")
    if budget is None and args.snapshot_over_budget:
        raise ConfigError(
            "--snapshot-over-budget needs a budget: --restore-time-budget SECONDS or "
            "STATEKEEPER_RESTORE_TIME_BUDGET_S"
        )
    return budget


def _restore_budget(
    args: argparse.Namespace, budget: float | None, settings: Any, spec: Any, report: Any
) -> Any:
    """The forecast vs the restore time budget (None without a budget); with
    ``--snapshot-over-budget``, the snapshot taken when over it."""
    from statekeeper.ops.audit.restore_budget import check_budget, enforce_budget

    if budget is None:
        return None
    if not args.snapshot_over_budget:
        return check_budget(report, budget)
    return enforce_budget(
        report,
        budget,
        settings,
        spec.build_topology(),
        lambda: _snapshot_storage(settings, create=True),
    )


def _audit_lines(report: Any) -> list[str]:
    rate = report.rate
    lines = [
        f"{report.application_id}: {report.verdict} (broker {report.broker}; contents read "
        f"with {report.measured_with}; restore rate {rate.records_per_s:,.0f} records/s, "
        f"{rate.source}: {rate.detail})"
    ]
    if report.snapshots_note:
        lines.append(f"  snapshots: none considered ({report.snapshots_note})")
    for change in report.applied:
        lines.append(f"  fixed {change.topic}: {change.key} {change.before} -> {change.after}")
    for topic in report.topics:
        line = f"  {topic.verdict:4} {topic.topic} (store {topic.store})"
        if topic.contents is not None:
            c = topic.contents
            line += (
                f": {'~' if c.sampled else ''}{c.records} records, {c.distinct_keys} keys, "
                f"{c.tombstone_share:.1%} tombstones, {c.markers} markers, "
                f"{c.superseded_share:.1%} superseded"
            )
        lines.append(line)
        f = topic.forecast
        if f is not None:
            lines.append(
                f"       restore: full ~{f.full_restore_seconds:.3g}s ({f.full_records} records)"
                f", newest snapshot + tail ~{f.snapshot_tail_seconds:.3g}s ({f.tail_records} "
                f"records; {f.snapshot_coverage}/{len(f.partitions)} partitions have a "
                f"snapshot); a fresh snapshot would cut {f.fresh_snapshot_cut_records} "
                "records from the next restore"
            )
        lines.extend(f"       {reason}" for reason in topic.reasons())
    if report.trim is not None:
        for action in report.trim.actions:
            lines.append(
                f"  trim {action.topic}[{action.partition}]: {action.records} records below "
                f"offset {action.trim_to}"
            )
        for skip in report.trim.skipped:
            lines.append(f"  trim {skip.topic}[{skip.partition}]: skipped, {skip.reason}")
    return lines


# --- stores -------------------------------------------------------------------------------


def _add_stores(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stores = _subcommand(commands, "stores", "see an app's local state (read-only)")
    sub = stores.add_subparsers(title="store commands", metavar="ACTION")
    listing = _subcommand(
        sub,
        "list",
        "every store and each task's local copy (entries approximate)",
        _cmd_stores_list,
    )
    inspect = _subcommand(sub, "inspect", "print entries of one store", _cmd_stores_inspect)
    for parser in (listing, inspect):
        _app_options(parser)
        parser.add_argument("--state-dir", help="state root (default: the spec's settings)")
    inspect.add_argument("--store", required=True, help="store name")
    which = inspect.add_mutually_exclusive_group()
    which.add_argument("--key", help="one key, as text (serialized with the store's key serde)")
    which.add_argument("--prefix", help="keys starting with this text")
    inspect.add_argument(
        "--limit", type=_int_in(1), default=100, help="most entries shown, >= 1 (100)"
    )


def _store_app(args: argparse.Namespace) -> tuple[Any, Any]:
    settings, spec = _app_target(args, need_spec="stores")
    return settings, spec.build_topology()


def _cmd_stores_list(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from statekeeper.ops.stores.local_stores import list_local_stores

    settings, topology = _store_app(args)
    copies = list_local_stores(settings, topology)
    lines = [f"{settings.application_id}: {len(copies)} local store copies in {settings.state_dir}"]
    for c in copies:
        entries = "in memory only" if not c.on_disk else f"~{c.approx_entries} entries (approx)"
        lines.append(f"  {c.store:24} {c.kind:7} task {c.task:6} {entries}, {c.bytes_on_disk} B")
    payload = {"application_id": settings.application_id, "stores": [asdict(c) for c in copies]}
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _cmd_stores_inspect(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from statekeeper.ops.stores.store_inspector import inspect_store

    settings, topology = _store_app(args)
    entries = inspect_store(
        settings, topology, args.store, key=args.key, prefix=args.prefix, limit=args.limit
    )
    lines = [
        f"  [{e.task}] {e.key!r}"
        + (f" @{e.window_start}" if e.window_start is not None else "")
        + f" = {e.value!r}"
        for e in entries
    ]
    lines.append(f"{len(entries)} entries of {args.store!r}")
    payload = {"store": args.store, "entries": [asdict(e) for e in entries]}
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


# --- snapshot -----------------------------------------------------------------------------


def _add_snapshot(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snapshot = _subcommand(
        commands, "snapshot", "snapshots of an app's stores (invariant 8, docs/invariants.md)"
    )
    sub = snapshot.add_subparsers(title="snapshot commands", metavar="ACTION")
    create = _subcommand(
        sub,
        "create",
        "snapshot every task: a running app at its next commit (through its status "
        "endpoint), a stopped app from its local state",
        _cmd_snapshot_create,
    )
    listing = _subcommand(
        sub,
        "list",
        "complete snapshots (those with a manifest) and unreadable manifests (exit code 1 "
        "when one is listed)",
        _cmd_snapshot_list,
    )
    verify = _subcommand(
        sub,
        "verify",
        "re-hash every file of every snapshot (exit code 1 on a bad one or an unreadable "
        "manifest); --repair re-uploads damaged files from local copies",
        _cmd_snapshot_verify,
    )
    prune = _subcommand(
        sub,
        "prune",
        "apply retention; always keeps the newest verified snapshot per store",
        _cmd_snapshot_prune,
    )
    for parser in (create, listing, verify, prune):
        _app_options(
            parser,
            app_help="the app: its spec file (.yaml/.toml) or its application id (its spec "
            f"found in ${SPECS_DIR_ENV}; "
            + ("needed here)" if parser is create else "or none: the id alone will do)"),
        )
        parser.add_argument("--url", help="snapshot root URL (default: settings.snapshot_url)")
    for parser in (create, listing, verify):
        parser.add_argument("--task", action="append", help="only this task (repeatable)")
        parser.add_argument("--store", action="append", help="only this store (repeatable)")
    create.add_argument("--state-dir", help="state root (default: the spec's settings)")
    verify.add_argument(
        "--repair",
        action="store_true",
        help="upload again every missing or damaged shared file a local copy has (any file "
        "under the state root, or --local DIR, with the same SHA-256); lists the rest as "
        "unrepairable",
    )
    verify.add_argument(
        "--state-dir", help="--repair: the state root to search (default: the spec's settings)"
    )
    verify.add_argument(
        "--local",
        action="append",
        metavar="DIR",
        help="--repair: another folder to search for copies (repeatable)",
    )
    _timeout_option(create, 300.0, "a running app: how long to wait for the upload, seconds")
    prune.add_argument("--keep", type=_int_in(0), help="snapshots kept per task and store")
    prune.add_argument("--max-age-h", type=float, help="drop snapshots older than this (hours)")
    prune.add_argument(
        "--grace-h",
        type=float,
        default=1.0,
        help="unreferenced shared files and upload leftovers younger than this stay (1 h)",
    )


def _snapshot_target(args: argparse.Namespace, need_spec: str | None = None) -> tuple[Any, Any]:
    """(settings, app spec or None) for ``--app``: a spec file, or an application id (its
    spec when the specs folder has it) unless the command named by ``need_spec`` needs the
    spec; ``--task``/``--store`` are checked against the spec's topology."""
    settings, spec = _app_target(args, need_spec=need_spec)
    if spec is not None and (getattr(args, "task", None) or getattr(args, "store", None)):
        _check_selection(args, spec.build_topology())
    return settings, spec


def _snapshot_storage(settings: Any, create: bool = False) -> Any:
    from statekeeper.snapshots import storage_for

    return storage_for(settings, create=create)


def _existing_snapshot_storage(
    args: argparse.Namespace, settings: Any, empty: dict[str, Any]
) -> Any | None:
    """The app's snapshot storage, or None after saying "no snapshots yet" (an empty catalog
    is no error: a new app has none until its first snapshot interval)."""
    from statekeeper.snapshots.manifest import NoSnapshotsYetError

    try:
        return _snapshot_storage(settings)
    except NoSnapshotsYetError as exc:
        _emit(
            args, {"application_id": settings.application_id, **empty, "note": str(exc)}, str(exc)
        )
        return None


def _snapshot_filter(args: argparse.Namespace, manifests: list[Any]) -> list[Any]:
    """Manifests (or unreadable manifests: their task and store come from their path) of
    the ``--task`` and ``--store`` asked for."""
    return [
        m
        for m in manifests
        if (not args.task or m.task in args.task) and (not args.store or m.store in args.store)
    ]


def _unreadable_lines(unreadable: list[Any]) -> list[str]:
    return [f"  UNREADABLE {u.path} ({u.kind}): {u.reason}" for u in unreadable]


def _cmd_snapshot_create(args: argparse.Namespace) -> int:
    from statekeeper.ops.snapshot_app import running_app_status_url, snapshot_app

    settings, spec = _snapshot_target(args, need_spec="snapshot create")
    status_url = running_app_status_url(settings)
    if status_url is not None:
        return _snapshot_running(args, settings, status_url)
    storage = _snapshot_storage(settings, create=True)
    results = snapshot_app(
        settings, spec.build_topology(), storage, tasks=args.task, stores=args.store
    )
    total = sum(r.bytes_total for r in results)
    uploaded = sum(r.bytes_uploaded for r in results)
    payload = {
        "application_id": settings.application_id,
        "url": storage.url,
        "snapshots": [r.as_dict() for r in results],
        "bytes_total": total,
        "bytes_uploaded": uploaded,
    }
    lines = [
        f"{settings.application_id}: {len(results)} store snapshot(s) to {storage.url}; "
        f"uploaded {uploaded} of {total} bytes"
    ]
    lines += [
        f"  {r.manifest.task} {r.manifest.store}: {r.manifest.snapshot_id} "
        f"({r.manifest.key_count} keys, batch {r.manifest.batch_id}, pause {r.pause_ms:.1f} ms, "
        f"uploaded {r.bytes_uploaded}/{r.bytes_total} bytes)"
        for r in results
    ]
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _snapshot_running(args: argparse.Namespace, settings: Any, status_url: str) -> int:
    from statekeeper.errors import ConfigError
    from statekeeper.ops.snapshot_app import snapshot_running_app

    if args.task or args.store:
        raise ConfigError(
            f"app {settings.application_id} is running ({status_url}): it snapshots every "
            "task and store at its next commit; --task/--store apply to a stopped app"
        )
    request = snapshot_running_app(status_url, timeout_s=args.timeout_s)
    payload = {"application_id": settings.application_id, "running": True, **request}
    lines = [
        f"{settings.application_id} (running): snapshot {request['request_id']} "
        f"{request['state']} at batch {request.get('batch_id')}"
    ]
    lines += [
        f"  {r['task']} {r['store']}: {r['snapshot_id']} (pause {r['pause_ms']} ms)"
        for r in request["snapshots"]
    ]
    lines += [f"  FAILED {e['task']} ({e['phase']}): {e['error']}" for e in request["errors"]]
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK if request["state"] == "uploaded" else EXIT_ERROR


def _cmd_snapshot_list(args: argparse.Namespace) -> int:
    from statekeeper.snapshots import read_catalog

    settings, _ = _snapshot_target(args)
    storage = _existing_snapshot_storage(args, settings, {"snapshots": [], "unreadable": []})
    if storage is None:
        return EXIT_OK
    catalog = read_catalog(storage)
    manifests = _snapshot_filter(args, catalog.manifests)
    unreadable = _snapshot_filter(args, catalog.unreadable)
    rows = [
        {
            "snapshot_id": m.snapshot_id,
            "task": m.task,
            "store": m.store,
            "batch_id": m.batch_id,
            "key_count": m.key_count,
            "bytes": m.total_bytes,
            "created_at": m.created_at,
            "marker_offset": m.marker_offset,
            "parent": m.parent,
        }
        for m in manifests
    ]
    lines = [f"{settings.application_id}: {len(rows)} snapshot(s) in {storage.url}"]
    lines += [f"  {r['snapshot_id']}  {r['key_count']} keys  {r['bytes']} bytes" for r in rows]
    lines += _unreadable_lines(unreadable)
    payload = {
        "application_id": settings.application_id,
        "snapshots": rows,
        "unreadable": [u.as_dict() for u in unreadable],
    }
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK if not unreadable else 1


def _cmd_snapshot_verify(args: argparse.Namespace) -> int:
    from statekeeper.snapshots import read_catalog, repair_snapshots, verify_snapshot
    from statekeeper.snapshots.repair import default_roots

    settings, _ = _snapshot_target(args)
    empty = {"ok": True, "snapshots": [], "unreadable": [], "repair": None}
    storage = _existing_snapshot_storage(args, settings, empty)
    if storage is None:
        return EXIT_OK
    catalog = read_catalog(storage)
    unreadable = _snapshot_filter(args, catalog.unreadable)
    results = [verify_snapshot(storage, m) for m in _snapshot_filter(args, catalog.manifests)]
    repair = None
    if args.repair:
        roots = default_roots(settings) + [Path(p) for p in args.local or []]
        repair = repair_snapshots(storage, results, roots)
        results = repair.results
    bad = [r for r in results if not r.ok]
    lines = [
        f"{settings.application_id}: {len(results) - len(bad)} of {len(results)} "
        "snapshot(s) verified"
        + (f", {len(unreadable)} unreadable manifest(s)" if unreadable else "")
    ]
    if repair is not None:
        lines += [
            f"  REPAIRED {f['name']} ({f['sha256'][:12]}) from {f['source']}"
            for f in repair.repaired
        ]
        lines += [
            f"  UNREPAIRABLE {f['name']} ({f['sha256'][:12]}): {f['reason']}; needed by "
            + ", ".join(f["snapshots"])
            for f in repair.unrepairable
        ]
    for r in bad:
        problems = ", ".join(f"{b['name']} ({b['problem']})" for b in r.bad)
        lines.append(f"  BAD {r.manifest.snapshot_id}: {problems}")
    lines += _unreadable_lines(unreadable)
    ok = not bad and not unreadable
    payload = {
        "application_id": settings.application_id,
        "ok": ok,
        "snapshots": [r.as_dict() for r in results],
        "unreadable": [u.as_dict() for u in unreadable],
        "repair": None
        if repair is None
        else {"repaired": repair.repaired, "unrepairable": repair.unrepairable},
    }
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK if ok else 1


def _cmd_snapshot_prune(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from statekeeper.errors import ConfigError
    from statekeeper.snapshots import prune

    if args.keep is None and args.max_age_h is None:
        raise ConfigError("snapshot prune needs --keep N and/or --max-age-h H")
    if (args.keep is not None and args.keep < 0) or (args.max_age_h or 0) < 0:
        raise ConfigError("--keep and --max-age-h must be >= 0")
    settings, _ = _snapshot_target(args)
    empty = {
        "kept": [],
        "deleted_snapshots": [],
        "deleted_shared": [],
        "deleted_leftovers": [],
        "unverified": [],
        "unreadable": [],
        "shared_kept_because": None,
    }
    storage = _existing_snapshot_storage(args, settings, empty)
    if storage is None:
        return EXIT_OK
    report = prune(
        storage,
        keep=args.keep,
        max_age=None if args.max_age_h is None else timedelta(hours=args.max_age_h),
        grace=timedelta(hours=args.grace_h),
    )
    text = (
        f"{settings.application_id}: kept {len(report.kept)}, deleted "
        f"{len(report.deleted_snapshots)} snapshot(s), {len(report.deleted_shared)} shared "
        f"file(s), {len(report.deleted_leftovers)} leftover(s)"
        + (f"; failed verify: {report.unverified}" if report.unverified else "")
        + (
            f"; {len(report.unreadable)} unreadable manifest(s) kept, their files too"
            if report.unreadable
            else ""
        )
        + (
            f"; no shared file deleted: {report.shared_kept_because}"
            if report.shared_kept_because
            else ""
        )
    )
    _emit(args, {"application_id": settings.application_id, **report.as_dict()}, text)
    return EXIT_OK


# --- restore ------------------------------------------------------------------------------


def _add_restore(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    restore = _subcommand(
        commands,
        "restore",
        "restore a stopped app's stores (or a copy, --to DIR) from a snapshot plus the tail",
        _cmd_restore,
    )
    _app_options(restore)
    restore.add_argument("--task", action="append", help="only this task (repeatable)")
    restore.add_argument("--store", action="append", help="only this store (repeatable)")
    restore.add_argument("--url", help="snapshot root URL (default: settings.snapshot_url)")
    restore.add_argument("--state-dir", help="state root (default: the spec's settings)")
    restore.add_argument(
        "--to",
        metavar="DIR",
        help="build a copy under this state root instead (read-only against the changelogs; "
        "the app may keep running)",
    )
    restore.add_argument(
        "--from-snapshot",
        default="latest",
        metavar="ID|latest|none",
        help="snapshot id, the newest verified one (latest, default) or none (full replay)",
    )


def _download_progress(enabled: bool) -> Any:
    """A context giving a rich progress callback per downloaded snapshot on a terminal, or
    None (no bar)."""
    import contextlib

    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import DownloadColumn, Progress

    @contextlib.contextmanager
    def bars() -> Any:
        ids: dict[tuple[str, str], Any] = {}
        with Progress(*Progress.get_default_columns(), DownloadColumn(), transient=True) as bar:

            def update(task: str, store: str, done: int, total: int) -> None:
                if (task, store) not in ids:
                    ids[(task, store)] = bar.add_task(f"{task} {store}", total=total)
                bar.update(ids[(task, store)], completed=done, total=total)

            yield update

    return bars()


def _cmd_restore(args: argparse.Namespace) -> int:
    from statekeeper.ops.restore import NONE, restore_app

    settings, spec = _snapshot_target(args, need_spec="restore")
    storage = None if args.from_snapshot == NONE else _snapshot_storage(settings)
    with _download_progress(enabled=not args.json and sys.stderr.isatty()) as progress:
        reports = restore_app(
            settings,
            spec.build_topology(),
            storage,
            tasks=args.task,
            stores=args.store,
            from_snapshot=args.from_snapshot,
            progress=progress,
            to=Path(args.to) if args.to else None,
        )
    payload = {
        "application_id": settings.application_id,
        "state_dir": str(args.to or settings.state_dir),
        "stores": [r.as_dict() for r in reports],
        "records_replayed": sum(r.records_replayed for r in reports),
        "bytes_downloaded": sum(r.bytes_downloaded for r in reports),
    }
    where = args.to or settings.state_dir
    lines = [f"{settings.application_id}: restored {len(reports)} store(s) under {where}"]
    for r in reports:
        source = f"snapshot {r.snapshot_id}" if r.snapshot_id else r.source
        lines.append(
            f"  {r.task} {r.store}: {source}, {r.records_replayed} records replayed, "
            f"{r.bytes_downloaded} bytes downloaded, {r.seconds:.2f} s"
            + (f" ({r.note})" if r.note else "")
        )
        lines += [f"    fell back from {f['snapshot_id']}: {f['reason']}" for f in r.fallbacks]
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


# --- drill --------------------------------------------------------------------------------


def _add_drill(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drill = _subcommand(
        commands,
        "drill",
        "restore every store into a sandbox and prove it right (exit 1 when a check fails)",
        _cmd_drill,
    )
    _app_options(drill)
    drill.add_argument(
        "--report-dir",
        help="where the record, report.html and Data Docs go "
        "(default: <state_dir>/.drills/<app>/<drill id>)",
    )
    drill.add_argument(
        "--from-snapshot",
        default="latest",
        metavar="ID|latest|none",
        help="snapshot id, the newest verified one (latest, default) or none (full replay)",
    )
    drill.add_argument("--url", help="snapshot root URL (default: settings.snapshot_url)")
    drill.add_argument("--state-dir", help="state root (default: the spec's settings)")
    drill.add_argument(
        "--keep-sandbox", action="store_true", help="leave the restored sandbox in the report dir"
    )
    drill.add_argument(
        "--spark",
        action="store_true",
        help="also diff with the shipped app's PySpark SQL recomputation (slow: starts Spark)",
    )


def _spark_drill_models(spec: Any) -> list[Any]:
    """The ``spark_models(params)`` of a shipped app (``spark_apps/<app>/drill_model.py``,
    found next to the spec's topology), for ``drill --spark``."""
    import importlib

    from statekeeper.errors import ConfigError

    module, _, _ = spec.topology.rpartition(":")
    root = None
    if module.endswith(".py"):
        path = Path(module)
        root, package = path.parents[2], f"{path.parents[1].name}.{path.parent.name}"
    else:
        package = module.rpartition(".")[0]
    if not package.startswith("spark_apps."):
        raise ConfigError(
            f"--spark: {spec.application_id!r} is not a shipped app (spark_apps/<app>); only "
            "those have a PySpark SQL recomputation"
        )
    if root is not None and str(root) not in sys.path:
        sys.path.insert(0, str(root))  # the app's modules import each other as spark_apps.*
    try:
        models = importlib.import_module(f"{package}.drill_model")
    except ImportError as exc:
        raise ConfigError(
            f"--spark: {package} has no PySpark recomputation for drills: {exc}"
        ) from exc
    found = list(models.spark_models(spec.params))
    if not found:
        raise ConfigError(
            f"--spark: the recomputation of {package} does not model this app's params "
            f"{spec.params} (see {package}.drill_model)"
        )
    return found


def _cmd_drill(args: argparse.Namespace) -> int:
    """Exit 0 when the drill passes, 1 when a check fails, 2 when it cannot finish; once the
    spec is read, an unfinished drill is recorded too (status ``error``: record.json, history
    row, report.html), so it shows in the trend."""
    import traceback

    from statekeeper.ops.drill import run_drill
    from statekeeper.ops.drill.drill import new_record, record_error
    from statekeeper.snapshots import SnapshotError
    from statekeeper.snapshots.install import NONE

    settings, spec = _snapshot_target(args, need_spec="drill")

    def say(line: str) -> None:
        print(f"drill: {line}", file=sys.stderr, flush=True)

    record = new_record(
        settings, Path(args.report_dir) if args.report_dir else None, args.from_snapshot
    )
    error: Exception | None = None
    try:
        try:
            storage = None if args.from_snapshot == NONE else _snapshot_storage(settings)
        except SnapshotError as exc:
            raise SnapshotError(
                f"{exc}; drill by full changelog replay: --from-snapshot none"
            ) from exc
        record = run_drill(
            settings,
            spec.build_topology(),
            storage,
            say=say,
            keep_sandbox=args.keep_sandbox,
            spark_models=_spark_drill_models(spec) if args.spark else None,
            record=record,
        )
    except Exception as exc:  # noqa: BLE001 - every error is recorded, then exits 2
        error = exc
        if record.error is None:  # raised before run_drill could record it
            record_error(settings, record, exc, say)
    age = "-" if record.snapshot_age_s is None else f"{record.snapshot_age_s:.1f} s"
    lines = [
        f"{record.app}: drill {record.drill_id} "
        + {"pass": "PASSED", "fail": "FAILED"}.get(record.status, "ERROR"),
        f"  RPO {record.committed_records_behind} committed record(s) behind the live head, "
        f"snapshot age {age}; {record.source_records_behind} source record(s) not yet "
        f"processed, {record.changelog_records_behind} changelog offset(s) after the restored "
        "markers",
        f"  RTO {record.rto_s:.3f} s, {record.records_replayed} records replayed, "
        f"{record.bytes_downloaded} bytes downloaded, wall {record.wall_s:.2f} s",
        f"  report {record.report_html}",
    ]
    if record.error is not None:
        lines.append(f"  ERROR {record.error}")
    for s in record.stores:
        for name, check in s.checks.items():
            if check.failed:
                keys = f" keys: {', '.join(check.examples)}" if check.examples else ""
                lines.append(f"  FAIL {s.task} {s.store} {name}: {check.detail}{keys}")
                lines += [f"      {line}" for line in check.mismatch_lines()]
    if not record.stores and record.error is None:
        lines.append("  FAIL no store was restored")
    _emit(args, record.as_dict(), "\n".join(lines))
    if error is not None:
        if not isinstance(error, StatekeeperError):
            traceback.print_exception(error, file=sys.stderr)
        print(f"statekeeper: error: {record.error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK if record.passed else 1


# --- platform (make up / down / status) ---------------------------------------------------


def _add_platform(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    platform = _subcommand(commands, "platform", "the embedded broker + Airflow on 127.0.0.1")
    actions = platform.add_subparsers(title="actions", metavar="ACTION")
    for name, text, handler in (
        (
            "up",
            "start what is not running, unpause the DAGs, launch the apps and name each one's "
            "state (exit code 3 when an app is FAILED or down)",
            _cmd_platform_up,
        ),
        ("down", "stop every process the platform started", _cmd_platform_down),
        (
            "status",
            "what runs: services and apps (exit code 3 when a service or an app is down, or an "
            "app FAILED)",
            _cmd_platform_status,
        ),
    ):
        sub = _subcommand(actions, name, text, handler)
        _run_dir_option(
            sub,
            Path("var/platform"),
            "the platform's folder: pid files, logs, Airflow home (var/platform)",
            "--root",
        )
        if name == "up":
            sub.add_argument(
                "--airflow-port", type=PORT, help="1-65535 (default: last used, else 8080)"
            )
            sub.add_argument(
                "--broker-port", type=PORT, help="1-65535 (default: last used, else 9092)"
            )
            _timeout_option(sub, 180.0, "seconds to come up")
            sub.add_argument(
                "--specs-dir", type=Path, help="app specs the DAGs act on (default: spark_apps/)"
            )
            sub.add_argument(
                "--apps-timeout-s",
                type=_seconds,
                default=180.0,
                help="seconds to wait for every app to run (or be FAILED/stopped); 0: no wait "
                "(180)",
            )
            sub.add_argument(
                "--apps-timeout", dest="apps_timeout_s", type=_seconds, help=argparse.SUPPRESS
            )


def _cmd_platform_up(args: argparse.Namespace) -> int:
    from statekeeper.platform import PlatformConfig, up
    from statekeeper.platform.report import up_text

    config = PlatformConfig.load(
        args.run_dir,
        airflow_port=args.airflow_port,
        broker_port=args.broker_port,
        specs_dir=args.specs_dir,
    )
    say = (lambda _: None) if args.json else (lambda line: print(line, flush=True))
    result = up(config, timeout_s=args.timeout_s, apps_timeout_s=args.apps_timeout_s, say=say)
    _emit(args, result, up_text(result))
    return EXIT_NOT_RUNNING if result["apps_bad"] else EXIT_OK


def _cmd_platform_down(args: argparse.Namespace) -> int:
    from statekeeper.platform import PlatformConfig, down

    say = (lambda _: None) if args.json else (lambda line: print(line, flush=True))
    result = down(PlatformConfig.load(args.run_dir), say=say)
    left = result["left"]
    _emit(args, result, f"platform down{'; STILL RUNNING: ' + str(left) if left else ''}")
    return EXIT_ERROR if left else EXIT_OK


def _cmd_platform_status(args: argparse.Namespace) -> int:
    from statekeeper.platform import PlatformConfig, status
    from statekeeper.platform.report import status_text

    result = status(PlatformConfig.load(args.run_dir))
    _emit(args, result, status_text(result))
    return EXIT_OK if result["running"] and not result["apps_bad"] else EXIT_NOT_RUNNING


# --- cluster: a Spark standalone cluster on 127.0.0.1 -------------------------------------


def _add_cluster(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = _subcommand(commands, "cluster", "a Spark standalone cluster on 127.0.0.1")
    actions = cluster.add_subparsers(title="actions", metavar="ACTION")
    for name, text, handler in (
        ("start", "start a master and workers in the background", _cmd_cluster_start),
        ("stop", "stop every process of the cluster recorded in --dir", _cmd_cluster_stop),
        ("status", "what runs (exit code 3 when not every worker is up)", _cmd_cluster_status),
    ):
        sub = _subcommand(actions, name, text, handler)
        _run_dir_option(
            sub, Path("var/cluster"), "logs, work dirs, cluster.json (var/cluster)", "--dir"
        )
        if name == "start":
            sub.add_argument("--workers", type=_int_in(1), default=2, help="number of workers")
            sub.add_argument("--cores", type=_int_in(1), default=1, help="cores per worker")
            sub.add_argument("--memory", default="2g", help="memory per worker (e.g. 2g)")
            _timeout_option(sub, 90.0, "seconds to come up")


def _cmd_cluster_start(args: argparse.Namespace) -> int:
    from statekeeper.cluster.local_cluster import ClusterConfig, LocalSparkCluster

    config = ClusterConfig(
        base_dir=args.run_dir,
        workers=args.workers,
        cores_per_worker=args.cores,
        memory_per_worker=args.memory,
        start_timeout_s=args.timeout_s,
    )
    status = LocalSparkCluster(config).start().status()
    _emit(
        args,
        status,
        f"Spark master {status['master_url']} (web UI {status['master_webui_url']}), "
        f"{status['alive_workers']} workers; logs in {status['logs']}\n"
        f"run an app on it: statekeeper app run --app SPEC --set "
        f"spark_master={status['master_url']}\n"
        f"stop it: statekeeper cluster stop --run-dir {args.run_dir}",
    )
    return EXIT_OK


def _cmd_cluster_stop(args: argparse.Namespace) -> int:
    from statekeeper.cluster.local_cluster import STATE_FILE, LocalSparkCluster

    if not (args.run_dir / STATE_FILE).is_file():
        _emit(
            args,
            {"base_dir": str(args.run_dir), "stopped": [], "killed": [], "left": []},
            f"no cluster recorded in {args.run_dir}",
        )
        return EXIT_OK
    cluster = LocalSparkCluster.attach(args.run_dir)
    found = cluster.processes()
    killed = cluster.stop()
    left = cluster.processes()
    result = {"base_dir": str(cluster.base_dir), "stopped": found, "killed": killed, "left": left}
    text = f"cluster in {cluster.base_dir} stopped ({len(found)} processes)"
    _emit(args, result, text + (f"; STILL RUNNING: {left}" if left else ""))
    return EXIT_ERROR if left else EXIT_OK


def _cmd_cluster_status(args: argparse.Namespace) -> int:
    from statekeeper.cluster.local_cluster import STATE_FILE, LocalSparkCluster

    if not (args.run_dir / STATE_FILE).is_file():
        _emit(
            args, {"base_dir": str(args.run_dir), "running": False}, f"no cluster in {args.run_dir}"
        )
        return EXIT_NOT_RUNNING
    status = LocalSparkCluster.attach(args.run_dir).status()
    if status["running"]:
        text = (
            f"Spark master {status['master_url']} (web UI {status['master_webui_url']}), "
            f"{status['alive_workers']}/{len(status['workers'])} workers alive"
        )
    else:
        text = (
            f"cluster in {status['base_dir']} is not running (master alive: "
            f"{status['master_alive']}, workers alive: {status['alive_workers']}/"
            f"{len(status['workers'])})"
        )
    _emit(args, status, text)
    return EXIT_OK if status["running"] else EXIT_NOT_RUNNING


# --- spec: the app spec's schema, and checking a spec -------------------------------------


def _add_spec(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spec = _subcommand(commands, "spec", "app specs: their JSON Schema, and checking one")
    sub = spec.add_subparsers(title="spec commands", metavar="ACTION")
    _subcommand(
        sub,
        "schema",
        "print the JSON Schema of an app spec (for editors: YAML language servers, taplo)",
        _cmd_spec_schema,
    )
    check = _subcommand(
        sub,
        "check",
        "validate an app spec (every field, supervision, settings with --set and the "
        "environment) and build its topology; no broker, no Spark",
        _cmd_spec_check,
    )
    _app_options(check)


def _cmd_spec_schema(args: argparse.Namespace) -> int:
    from statekeeper.app.spec import spec_json_schema

    print(json.dumps(spec_json_schema(), indent=None if args.json else 2, sort_keys=True))
    return EXIT_OK


def _cmd_spec_check(args: argparse.Namespace) -> int:
    settings, spec = _app_target(args, need_spec="spec check")
    topology = spec.build_topology()
    stores = sorted(getattr(topology, "stores", None) or {})
    payload = {
        "application_id": settings.application_id,
        "spec": str(spec.spec_path),
        "ok": True,
        "stores": stores,
        "bootstrap_servers": settings.bootstrap_servers,
        "state_dir": str(settings.state_dir),
    }
    _emit(
        args,
        payload,
        f"{settings.application_id}: spec OK ({len(stores)} store(s): {', '.join(stores)}; "
        f"bootstrap {settings.bootstrap_servers}, state_dir {settings.state_dir})",
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
