"""``statekeeper broker start|stop|status``: the embedded Kafka-compatible broker."""

from __future__ import annotations

import argparse
from pathlib import Path

from statekeeper.cli.common import (
    EXIT_NOT_RUNNING,
    EXIT_OK,
    PORT_OR_FREE,
    emit,
    run_dir_option,
    subcommand,
    timeout_option,
)


def add_broker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = subcommand(commands, "broker", "run the embedded Kafka-compatible broker (Tansu)")
    actions = broker.add_subparsers(title="actions", metavar="ACTION")

    def run_dir_arg(sub: argparse.ArgumentParser) -> None:
        run_dir_option(
            sub,
            None,
            "pid files, logs and broker.json (default: STATEKEEPER_EMBEDDED_BROKER_DIR "
            "or var/broker)",
        )

    start = subcommand(
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
    timeout_option(start, 20.0, "start-up timeout, seconds")
    run_dir_arg(start)

    stop = subcommand(actions, "stop", "stop the broker recorded in the run dir", _cmd_broker_stop)
    timeout_option(stop, 10.0, "seconds before SIGKILL")
    run_dir_arg(stop)

    status = subcommand(
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
    emit(
        args,
        {"running": True, **state.report()},
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
    emit(args, result, text)
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
    emit(args, status, text)
    return EXIT_OK if status["running"] else EXIT_NOT_RUNNING
