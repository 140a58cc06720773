"""The ``statekeeper`` command.

One ``_cmd_*`` function per subcommand, registered in :func:`build_parser`; each returns an
exit code. Heavy modules are imported inside the functions so ``statekeeper --help`` and
Airflow tasks that shell out stay fast. Errors from :mod:`statekeeper.errors` print one
line to stderr and exit 2; every subcommand takes ``--json`` for machine-readable output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from statekeeper import __version__
from statekeeper.errors import StatekeeperError

EXIT_OK = 0
EXIT_ERROR = 2  # a StatekeeperError: bad config, broker unreachable, ...
EXIT_NOT_RUNNING = 3  # `broker status` when no broker runs (LSB convention)

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``statekeeper`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        # A command group given without its subcommand (e.g. `statekeeper broker`).
        args.parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return handler(args)
    except StatekeeperError as exc:
        print(f"statekeeper: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser; add a subcommand with a ``_add_*`` function below."""
    parser = argparse.ArgumentParser(
        prog="statekeeper",
        description="Kafka-Streams-grade state stores for PySpark, operated from Airflow.",
    )
    parser.add_argument("--version", action="version", version=f"statekeeper {__version__}")
    parser.set_defaults(parser=parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_broker(commands)
    _add_demo(commands)
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


# --- broker -------------------------------------------------------------------------------


def _add_broker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = _subcommand(commands, "broker", "run the embedded Kafka-compatible broker (Tansu)")
    actions = broker.add_subparsers(title="actions", metavar="ACTION")

    def run_dir_arg(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--run-dir",
            type=Path,
            help="pid files, logs and broker.json (default: STATEKEEPER_EMBEDDED_BROKER_DIR "
            "or var/broker)",
        )

    start = _subcommand(
        actions, "start", "start the broker on 127.0.0.1 in the background", _cmd_broker_start
    )
    start.add_argument(
        "--port",
        type=int,
        help="Kafka port (default: STATEKEEPER_EMBEDDED_BROKER_PORT or 9092; 0 picks a free port)",
    )
    start.add_argument(
        "--data-dir",
        type=Path,
        help="keep topics on disk here (S3 storage via localbucket); default: in memory",
    )
    start.add_argument("--timeout", type=float, default=20.0, help="start-up timeout, seconds")
    run_dir_arg(start)

    stop = _subcommand(actions, "stop", "stop the broker recorded in the run dir", _cmd_broker_stop)
    stop.add_argument("--timeout", type=float, default=10.0, help="seconds before SIGKILL")
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
        startup_timeout_s=args.timeout,
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

    result = stop_broker(_broker_run_dir(args), timeout_s=args.timeout)
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


# --- demo ---------------------------------------------------------------------------------


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _subcommand(commands, "demo", "run the state-store demo end to end", _cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from statekeeper.demo.store_demo import run

    result = run(args)
    return EXIT_OK if result is None else int(result)


if __name__ == "__main__":
    sys.exit(main())
